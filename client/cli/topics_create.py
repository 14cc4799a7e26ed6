"""``rill topics create``: create a topic, as ``kafka-topics.sh --create``.

Without ``--replication-factor`` (or with 1 on a broker without gRPC) it is the data
plane's CREATE_TOPIC at the first ``--bootstrap-server`` broker, which makes a Kafka
0.7-style topic there (or, in a cluster whose ``default.replication.factor`` is above 1,
a replicated one), as it always has. A factor (or ``--config``) goes through the Admin
gRPC service of that broker (its port found through METADATA, or ``--grpc``), which
spreads the replicas over the live brokers; the command then waits (``--wait`` seconds,
progress on stderr) until the controller has given every partition a leader and each
leader serves it.

A topic that exists already is an error (exit status 1, ``topic 'T' already exists``),
as in Kafka, unless ``--if-not-exists``: then the command says so on stderr and exits 0.
A 0.7-style topic exists "already" on the broker asked when that broker holds
partitions of it: in a 0.7 cluster each broker creates its own partitions of a topic,
so creating it on the next broker is not an error.
"""

from __future__ import annotations

import argparse

from rill.client.cli.bootstrap import admin_address, own_entry
from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, add_broker_arguments, info, positive_float, positive_int, topic_name
from rill.client.cli.leader_wait import wait_for_leaders
from rill.client.cli.topics_alter import config_entry
from rill.client.grpc_client import AdminClient, error_name
from rill.client.simple import SimpleConsumer
from rill.v1 import coordinator_pb2 as pb

__all__ = ["add_create", "run_create"]


def add_create(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``create`` action of ``rill topics``."""
    create = actions.add_parser("create", help="create a topic (replicated with --replication-factor above 1)")
    add_broker_arguments(create)
    create.add_argument("-t", "--topic", required=True, type=topic_name)
    create.add_argument("--partitions", required=True, type=positive_int, metavar="N")
    create.add_argument("--replication-factor", type=positive_int, metavar="R",
                        help="copies of each partition, on R brokers of the cluster (default: the broker's "
                             "default.replication.factor; 1: a 0.7-style topic on the broker asked)")
    create.add_argument("--config", action="append", type=config_entry, default=[], metavar="KEY=VALUE",
                        help="a replicated topic's setting: min.insync.replicas, unclean.leader.election.enable "
                             "(repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="a topic that exists already is not an error (exit 0)")
    create.add_argument("--grpc", metavar="HOST:PORT",
                        help="the Admin service to ask for a replicated topic (default: the gRPC port the "
                             "--bootstrap-server broker publishes)")
    create.add_argument("--wait", type=positive_float, default=30.0, metavar="SECONDS",
                        help="how long to wait for every partition of a replicated topic to get a leader "
                             "(default: 30)")
    create.set_defaults(run=run_create)


def run_create(args: argparse.Namespace) -> int:
    """Without ``--replication-factor`` the data plane's CREATE_TOPIC (the broker's ``default.replication.factor``,
    as Kafka's auto-creation); with one, Admin CreateTopic, so that an explicit 1 is a Kafka 0.7 topic even where
    the default is larger (a broker without gRPC has no other way than the data plane, and no ZooKeeper either)."""
    if _exists_on_broker(args):
        return _exists(args)
    if args.replication_factor is not None or args.config:
        if args.replication_factor != 1 or args.config or _has_grpc(args):
            return _create_replicated(args)
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout, security=security_of(args)) as client:
        partitions = client.create_topic(args.topic, args.partitions)
    print(f"Created topic {args.topic} with {partitions} partitions.")
    return 0


def _exists(args: argparse.Namespace) -> int:
    if not args.if_not_exists:
        raise CliError(f"topic {args.topic!r} already exists (--if-not-exists: not an error)")
    info(f"Topic {args.topic} already exists.")
    return 0


def _exists_on_broker(args: argparse.Namespace) -> bool:
    """Whether the broker asked (``args.broker``) lists the topic and leads a partition of it. When its own
    entry cannot be told apart in its answer (several brokers on its port), False: the broker decides."""
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout, security=security_of(args)) as client:
        metadata = client.metadata([args.topic])
    found = [t for t in metadata.topics if t.topic == args.topic and t.error == 0 and t.partitions]
    own = own_entry(metadata.brokers, host, port)
    return bool(found) and own is not None and own.broker_id in found[0].leaders


def _create_replicated(args: argparse.Namespace) -> int:
    """CreateTopic over gRPC, then wait until every partition has a leader."""
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
        response = client.create_topic(args.topic, args.partitions, args.replication_factor or 0, dict(args.config))
        if response.error_code == pb.TOPIC_ALREADY_EXISTS:
            return _exists(args)
        if response.error_code:
            raise CliError(f"topic {args.topic} not created: {error_name(response.error_code)}: "
                           f"{response.error_message}")
        factor = response.topic.replication_factor
        if factor <= 1 and not args.config:
            print(f"Created topic {args.topic} with {response.topic.partition_count} partitions.")
            return 0
        print(f"Created topic {args.topic} with {response.topic.partition_count} partitions, "
              f"replication factor {factor}.")
        if factor > 1:
            wait_for_leaders(client, args.topic, args.wait)
    return 0


def _has_grpc(args: argparse.Namespace) -> bool:
    """Whether the broker names a gRPC port (or ``--grpc`` is given): it is then remembered in ``args.grpc``."""
    if args.grpc:
        return True
    try:
        args.grpc = admin_address(args)
    except CliError:
        return False
    return True

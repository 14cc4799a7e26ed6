"""``rill topics list|create|describe|alter|delete|elect-leaders|reassign``.

``create`` without ``--replication-factor`` (or with 1) makes a Kafka 0.7-style topic on
the ``--broker`` it names, over the data plane, as it always has. A larger factor (or
``--config``) goes through the Admin gRPC service of a broker in a cluster (``--grpc``,
or the gRPC port the ``--broker`` publishes in METADATA), which spreads the replicas
over the live brokers; the command then waits (``--wait`` seconds, progress on stderr)
until the controller has given every partition a leader and each leader serves it.

``describe`` prints one tab-separated row per partition. Replicated topics add the
REPLICAS, ISR and LEADER_EPOCH columns (``-`` in them for a 0.7-style topic listed
beside one); ``--under-replicated`` prints only partitions whose ISR is smaller than
their replicas, and nothing at all when there are none (as kafka-topics.sh
``--describe --under-replicated-partitions``). When a described topic has settings
(``min.insync.replicas=3``...), a last CONFIGS column gives each row its topic's, as
``key=value,key=value`` (``-``: none); without any, the output is as before.

``alter`` changes a replicated topic's settings or adds partitions to it (``topics_alter``); ``delete``
deletes a topic (``topics_delete``); ``elect-leaders`` is
preferred leader election (``preferred_leaders``); ``reassign`` moves partitions to other
brokers (``topics_reassign``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rill.client.cli.common import CliError, add_broker_arguments, positive_float, positive_int, topic_name
from rill.client.cli.groups import add_grpc_arguments
from rill.client.cli.leader_wait import wait_for_leaders
from rill.client.cli.preferred_leaders import add_elect_leaders
from rill.client.cli.topics_alter import add_alter, config_entry, configs_text
from rill.client.cli.topics_delete import add_delete
from rill.client.cli.topics_reassign import add_reassign
from rill.client.grpc_client import AdminClient, error_name
from rill.client.simple import SimpleConsumer
from rill.v1 import admin_pb2 as apb

HEADER = "TOPIC\tPARTITION\tSTART\tEND\tBYTES\tLEADER"
REPLICATED_HEADER = "\tREPLICAS\tISR\tLEADER_EPOCH"
CONFIGS_HEADER = "\tCONFIGS"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("topics", help="list or create topics",
                              description="List the broker's topics or create one.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="print each topic and its partition count (tab-separated)")
    add_broker_arguments(listing)
    listing.set_defaults(run=run_list)
    _add_create(actions)
    describe = actions.add_parser("describe", help="partitions with start and end offsets and sizes (gRPC admin)")
    add_grpc_arguments(describe)
    describe.add_argument("-t", "--topic", action="append", type=topic_name, default=[],
                          help="a topic to describe (repeatable; default: every topic)")
    describe.add_argument("--under-replicated", "--under-replicated-partitions", dest="under_replicated",
                          action="store_true",
                          help="only partitions whose ISR is smaller than their replicas (no output: none)")
    describe.set_defaults(run=run_describe)
    add_alter(actions)
    add_delete(actions)
    add_elect_leaders(actions)
    add_reassign(actions)


def _add_create(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = actions.add_parser("create", help="create a topic (replicated with --replication-factor above 1)")
    add_broker_arguments(create)
    create.add_argument("-t", "--topic", required=True, type=topic_name)
    create.add_argument("--partitions", required=True, type=positive_int, metavar="N")
    create.add_argument("--replication-factor", type=positive_int, metavar="R",
                        help="copies of each partition, on R brokers of the cluster (default: a 0.7-style topic "
                             "on --broker)")
    create.add_argument("--config", action="append", type=config_entry, default=[], metavar="KEY=VALUE",
                        help="a replicated topic's setting: min.insync.replicas, unclean.leader.election.enable "
                             "(repeatable)")
    create.add_argument("--grpc", metavar="HOST:PORT",
                        help="the Admin service to ask for a replicated topic (default: the gRPC port --broker "
                             "publishes)")
    create.add_argument("--wait", type=positive_float, default=30.0, metavar="SECONDS",
                        help="how long to wait for every partition of a replicated topic to get a leader "
                             "(default: 30)")
    create.set_defaults(run=run_create)


def run_list(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        topics = client.topics()
    for name, partitions in sorted(topics.items()):
        print(f"{name}\t{partitions}")
    return 0


def run_create(args: argparse.Namespace) -> int:
    """Without ``--replication-factor`` the data plane's CREATE_TOPIC (the broker's ``default.replication.factor``,
    as Kafka's auto-creation); with one, Admin CreateTopic, so that an explicit 1 is a Kafka 0.7 topic even where
    the default is larger (a broker without gRPC has no other way than the data plane, and no ZooKeeper either)."""
    if args.replication_factor is not None or args.config:
        if args.replication_factor != 1 or args.config or _has_grpc(args):
            return run_create_replicated(args)
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        partitions = client.create_topic(args.topic, args.partitions)
    print(f"Created topic {args.topic} with {partitions} partitions.")
    return 0


def run_create_replicated(args: argparse.Namespace) -> int:
    """CreateTopic over gRPC, then wait until every partition has a leader."""
    address = args.grpc or grpc_address(args.broker, args.timeout)
    with AdminClient(address, args.timeout) as client:
        response = client.create_topic(args.topic, args.partitions, args.replication_factor or 0, dict(args.config))
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
    if args.grpc:
        return True
    try:
        args.grpc = grpc_address(args.broker, args.timeout)
    except CliError:
        return False
    return True


def grpc_address(broker: tuple[str, int], timeout: float) -> str:
    """The Admin address of the broker at ``broker``: its own entry in METADATA (same data port), reached
    by the host the user gave; else any broker's that serves gRPC."""
    host, port = broker
    with SimpleConsumer(host, port, timeout=timeout) as client:
        brokers = client.metadata([]).brokers
    served = [b for b in brokers if b.grpc_port > 0]
    for b in served:
        if b.port == port:
            return f"{host}:{b.grpc_port}"
    if not served:
        raise CliError(f"the broker at {host}:{port} names no gRPC port: give --grpc HOST:PORT")
    return f"{served[0].host}:{served[0].grpc_port}"


def run_describe(args: argparse.Namespace) -> int:
    with AdminClient(args.grpc, args.timeout) as client:
        topics = client.describe_topics(args.topic, under_replicated_only=args.under_replicated).topics
    missing = [t.topic for t in topics if t.error_code]
    rows = [(t, p) for t in topics for p in t.partitions]
    if rows or not args.under_replicated:
        configs = any(t.config for t in topics)
        replicated = args.under_replicated or configs or any(p.replicas for _, p in rows)
        print(HEADER + (REPLICATED_HEADER if replicated else "") + (CONFIGS_HEADER if configs else ""))
        for t, p in rows:
            print(describe_row(t, p, replicated) + (f"\t{configs_text(t.config)}" if configs else ""))
    if missing:
        raise CliError(f"unknown topic(s): {', '.join(missing)}")
    return 0


def describe_row(topic: apb.TopicDescription, p: apb.PartitionDescription, replicated: bool) -> str:
    """One partition's tab-separated row; with ``replicated``, its replicas, ISR and leader epoch too."""
    row = f"{topic.topic}\t{p.partition}\t{p.start_offset}\t{p.end_offset}\t{p.size_bytes}\t{p.leader}"
    if not replicated:
        return row
    if not p.replicas:  # a 0.7-style partition listed beside replicated ones
        return row + "\t-\t-\t-"
    return row + f"\t{_ids(p.replicas)}\t{_ids(p.isr)}\t{p.leader_epoch}"


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"

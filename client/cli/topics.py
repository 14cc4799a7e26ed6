"""``rill topics list|create|describe|alter|delete|elect-leaders|reassign``.

Every action takes ``--bootstrap-server`` (brokers' data-plane addresses); those that call the
Admin gRPC service find its port through METADATA (rill.client.cli.bootstrap). ``create``
is in ``topics_create``.

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

from rill.client.cli.bootstrap import add_admin_arguments, admin_address
from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, add_broker_arguments, topic_name
from rill.client.cli.preferred_leaders import add_elect_leaders
from rill.client.cli.topics_alter import add_alter, config_entry, configs_text
from rill.client.cli.topics_create import add_create
from rill.client.cli.topics_delete import add_delete
from rill.client.cli.topics_reassign import add_reassign
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.grpc_client import AdminClient
from rill.v1 import admin_pb2 as apb

__all__ = ["add_parser", "config_entry", "describe_row"]

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
    add_create(actions)
    describe = actions.add_parser("describe", help="partitions with start and end offsets and sizes (gRPC admin)")
    add_admin_arguments(describe)
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


def run_list(args: argparse.Namespace) -> int:
    """Every topic of the cluster (METADATA of the first bootstrap broker that answers) and its partition count."""
    metadata = ClusterMetadata(args.bootstrap, timeout=args.timeout, security=security_of(args))
    metadata.refresh()
    for name in sorted(metadata.topics):
        print(f"{name}\t{metadata.partitions(name)}")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
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

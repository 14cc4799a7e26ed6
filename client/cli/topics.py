"""``rill topics list|create|describe``."""

from __future__ import annotations

import argparse

from rill.client.cli.common import add_broker_arguments, positive_int, topic_name
from rill.client.grpc_client import AdminClient
from rill.client.cli.common import CliError
from rill.client.cli.groups import add_grpc_arguments
from rill.client.simple import SimpleConsumer


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("topics", help="list or create topics",
                              description="List the broker's topics or create one.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="print each topic and its partition count (tab-separated)")
    add_broker_arguments(listing)
    listing.set_defaults(run=run_list)
    create = actions.add_parser("create", help="create a topic")
    add_broker_arguments(create)
    create.add_argument("-t", "--topic", required=True, type=topic_name)
    create.add_argument("--partitions", required=True, type=positive_int, metavar="N")
    create.set_defaults(run=run_create)
    describe = actions.add_parser("describe", help="partitions with start and end offsets and sizes (gRPC admin)")
    add_grpc_arguments(describe)
    describe.add_argument("-t", "--topic", action="append", type=topic_name, default=[],
                          help="a topic to describe (repeatable; default: every topic)")
    describe.set_defaults(run=run_describe)


def run_list(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        topics = client.topics()
    for name, partitions in sorted(topics.items()):
        print(f"{name}\t{partitions}")
    return 0


def run_create(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        partitions = client.create_topic(args.topic, args.partitions)
    print(f"Created topic {args.topic} with {partitions} partitions.")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with AdminClient(args.grpc, args.timeout) as client:
        topics = client.describe_topics(args.topic).topics
    print("TOPIC\tPARTITION\tSTART\tEND\tBYTES\tLEADER")
    missing = [t.topic for t in topics if t.error_code]
    for t in topics:
        for p in t.partitions:
            print(f"{t.topic}\t{p.partition}\t{p.start_offset}\t{p.end_offset}\t{p.size_bytes}\t{p.leader}")
    if missing:
        raise CliError(f"unknown topic(s): {', '.join(missing)}")
    return 0

"""``rill topics list|create``."""

from __future__ import annotations

import argparse

from rill.client.cli.common import add_broker_arguments, positive_int, topic_name
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

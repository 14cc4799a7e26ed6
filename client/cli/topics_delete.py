"""``rill topics delete``: delete a topic (Kafka's ``kafka-topics.sh --delete``, the Admin DeleteTopic RPC).

Asks the Admin service of the first ``--bootstrap-server`` broker that answers (or
``--grpc``). A replicated topic is deleted cluster-wide: the broker marks it for
deletion and the controller has every broker delete its replicas, then removes the
topic; the command waits for that (``--timeout``) and prints::

    Deleted topic orders (3 partitions).

A Kafka 0.7-style topic has its partitions on each broker that created them: the broker
asked deletes its own, and the command says how many (ask each broker that holds the
topic). Exit status 1 with the broker's reason for an unknown or internal topic, a topic
being reassigned, or a broker with ``delete.topic.enable=false``; 3 when the deletion was
not complete within the timeout (it completes by itself once every broker holding a
replica is back).
"""

from __future__ import annotations

import argparse

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, info, topic_name
from rill.client.cli.bootstrap import add_admin_arguments, admin_address
from rill.client.grpc_client import AdminClient, error_name
from rill.v1 import coordinator_pb2 as pb

EXIT_PENDING = 3


def add_delete(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``delete`` action of ``rill topics``."""
    delete = actions.add_parser("delete", help="delete a topic (a replicated one cluster-wide)",
                                description="Delete a topic (kafka-topics.sh --delete): a replicated topic on every "
                                            "broker; a 0.7-style topic's partitions on the broker asked.")
    add_admin_arguments(delete)
    delete.add_argument("-t", "--topic", required=True, type=topic_name)
    delete.set_defaults(run=run_delete)


def run_delete(args: argparse.Namespace) -> int:
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
        response = client.delete_topic(args.topic, timeout_ms=int(args.timeout * 1000))
    if response.error_code == pb.REQUEST_TIMED_OUT:
        message = response.error_message
        info(f"{message[:1].upper()}{message[1:]}.")
        return EXIT_PENDING
    if response.error_code:
        raise CliError(f"topic {args.topic} not deleted: {error_name(response.error_code)}: {response.error_message}")
    if response.replicated:
        print(f"Deleted topic {args.topic} ({response.partitions} partitions).")
    else:
        print(f"Deleted topic {args.topic}: the {response.partitions} partitions of this broker (a Kafka 0.7-style "
              "topic is deleted broker by broker).")
    return 0

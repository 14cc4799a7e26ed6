"""``rill topics alter``: change a replicated topic's settings at run time (Kafka's ``kafka-configs.sh --alter``),
or add partitions to it (``kafka-topics.sh --alter --partitions``).

Asks any broker's Admin service (its gRPC port found through ``--bootstrap-server``, or
``--grpc``) for AlterTopicConfig: ``--config KEY=VALUE`` sets a setting (repeatable),
``--delete-config KEY`` removes one so the brokers' default applies again (repeatable);
the other settings are kept. It prints what changed, one
line per setting, ``(default)`` standing for a setting the topic does not carry::

    Altered config of topic orders:
      min.insync.replicas: 2 -> 3
      unclean.leader.election.enable: true -> (default)

or ``Config of topic orders unchanged.`` when the topic had those values already. The
brokers apply the change within moments, with no restart (the controller sends it).
Exit status 1 with the broker's reason for an unknown setting, a bad value or an unknown
topic.

``--partitions N`` asks the controller (Admin CreatePartitions, through any broker) to
grow the topic to N partitions, never fewer, prints the new ones with their replicas::

    Added 3 partitions to topic orders (now 6): 3 on 1,2,3; 4 on 2,3,1; 5 on 3,1,2.

and waits (``--wait``) until each has a serving leader, as ``create`` does. Consumer
groups subscribed to the topic rebalance onto the new partitions by themselves.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, positive_float, positive_int, topic_name
from rill.client.cli.bootstrap import add_admin_arguments, admin_address
from rill.client.cli.leader_wait import wait_for_leaders
from rill.client.grpc_client import AdminClient, error_name

DEFAULT = "(default)"


def config_entry(text: str) -> tuple[str, str]:
    """argparse type for ``KEY=VALUE``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def add_alter(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``alter`` action of ``rill topics``."""
    alter = actions.add_parser("alter", help="set or delete a replicated topic's settings, or add partitions",
                               description="Change a replicated topic's settings (kafka-configs.sh --alter): "
                                           "min.insync.replicas, unclean.leader.election.enable; or grow it to "
                                           "--partitions N.")
    add_admin_arguments(alter)
    alter.add_argument("-t", "--topic", required=True, type=topic_name)
    alter.add_argument("--config", "--add-config", dest="config", action="append", type=config_entry, default=[],
                       metavar="KEY=VALUE", help="a setting to set (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="a setting to remove: the brokers' default applies again (repeatable)")
    alter.add_argument("--partitions", type=positive_int, metavar="N",
                       help="grow the topic to N partitions (more than it has: partitions are never removed)")
    alter.add_argument("--wait", type=positive_float, default=30.0, metavar="SECONDS",
                       help="with --partitions, how long to wait for every new partition's leader (default: 30)")
    alter.set_defaults(run=run_alter)


def run_alter(args: argparse.Namespace) -> int:
    if not args.config and not args.delete_config and args.partitions is None:
        raise CliError("give --config KEY=VALUE, --delete-config KEY or --partitions N")
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
        if args.config or args.delete_config:
            response = client.alter_topic_config(args.topic, dict(args.config), args.delete_config)
            if response.error_code:
                raise CliError(f"config of topic {args.topic} not altered: {error_name(response.error_code)}: "
                               f"{response.error_message}")
            for line in change_lines(args.topic, response.previous, response.config):
                print(line)
        if args.partitions is not None:
            add_partitions(client, args.topic, args.partitions, args.wait)
    return 0


def add_partitions(client: AdminClient, topic: str, count: int, wait_s: float) -> None:
    """CreatePartitions, the new partitions printed, then wait for their leaders."""
    grown = client.create_partitions(topic, count)
    if grown.error_code:
        raise CliError(f"partitions of topic {topic} not added: {error_name(grown.error_code)}: "
                       f"{grown.error_message}")
    placed = "; ".join(f"{p.partition} on {','.join(str(b) for b in p.replicas)}" for p in grown.partitions)
    print(f"Added {len(grown.partitions)} partitions to topic {topic} (now {count}): {placed}.")
    wait_for_leaders(client, topic, wait_s, done="grown")


def change_lines(topic: str, before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """What an alteration changed, as printed (see the module docstring)."""
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if not keys:
        return [f"Config of topic {topic} unchanged."]
    return [f"Altered config of topic {topic}:"] + [
        f"  {k}: {before.get(k, DEFAULT)} -> {after.get(k, DEFAULT)}" for k in keys]


def configs_text(config: Mapping[str, str]) -> str:
    """A topic's settings for ``describe``'s CONFIGS column: ``k=v,k=v`` by key, ``-`` for none."""
    return ",".join(f"{k}={v}" for k, v in sorted(config.items())) or "-"

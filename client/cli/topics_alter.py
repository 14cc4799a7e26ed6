"""``rill topics alter``: change a replicated topic's settings at run time (Kafka's ``kafka-configs.sh --alter``).

Asks any broker's Admin service (``--grpc``) for AlterTopicConfig: ``--config KEY=VALUE``
sets a setting (repeatable), ``--delete-config KEY`` removes one so the brokers' default
applies again (repeatable); the other settings are kept. It prints what changed, one
line per setting, ``(default)`` standing for a setting the topic does not carry::

    Altered config of topic orders:
      min.insync.replicas: 2 -> 3
      unclean.leader.election.enable: true -> (default)

or ``Config of topic orders unchanged.`` when the topic had those values already. The
brokers apply the change within moments, with no restart (the controller sends it).
Exit status 1 with the broker's reason for an unknown setting, a bad value or an unknown
topic.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from rill.client.cli.common import CliError, topic_name
from rill.client.cli.groups import add_grpc_arguments
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
    alter = actions.add_parser("alter", help="set or delete a replicated topic's settings (no restart)",
                               description="Change a replicated topic's settings (kafka-configs.sh --alter): "
                                           "min.insync.replicas, unclean.leader.election.enable.")
    add_grpc_arguments(alter)
    alter.add_argument("-t", "--topic", required=True, type=topic_name)
    alter.add_argument("--config", "--add-config", dest="config", action="append", type=config_entry, default=[],
                       metavar="KEY=VALUE", help="a setting to set (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="a setting to remove: the brokers' default applies again (repeatable)")
    alter.set_defaults(run=run_alter)


def run_alter(args: argparse.Namespace) -> int:
    if not args.config and not args.delete_config:
        raise CliError("give --config KEY=VALUE or --delete-config KEY")
    with AdminClient(args.grpc, args.timeout) as client:
        response = client.alter_topic_config(args.topic, dict(args.config), args.delete_config)
    if response.error_code:
        raise CliError(f"config of topic {args.topic} not altered: {error_name(response.error_code)}: "
                       f"{response.error_message}")
    for line in change_lines(args.topic, response.previous, response.config):
        print(line)
    return 0


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

"""``rill groups list|describe|create|delete|rewind``, after kafka-consumer-groups.

Every action takes ``--bootstrap-server`` (brokers' data-plane addresses) and finds a
broker's gRPC port through METADATA (rill.client.cli.bootstrap); the group actions then
go to the group's coordinator (rill.client.cli.group_admin). ``describe`` is in
``groups_describe``, ``rewind`` (also ``reset-offsets``) in ``groups_reset``; groups of
ZooKeeper consumers (``--zookeeper``) are read by ``groups_zookeeper``.

- ``list``: every group of the cluster, tab-separated: GROUP, STATE, GENERATION,
  MEMBERS, TOPICS (the group's, its members' and those it committed offsets for),
  COORDINATOR (``id@host:port``, the data port). With ``--zookeeper``, the groups of
  ZooKeeper consumers instead.
- ``create``: CreateGroup with ``--topic`` (repeatable), ``--strategy``,
  ``--session-timeout-ms``, ``--rebalance-timeout-ms``, ``--ephemeral``. A group that
  exists already is an error (exit status 1) unless ``--if-not-exists``.
- ``delete``: groups without members (DeleteGroup at each one's coordinator); exit status
  1 if any was not deleted.
"""

from __future__ import annotations

import argparse

from rill.client.cli.bootstrap import add_admin_arguments, admin_address
from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, info, non_negative_int, topic_name
from rill.client.cli.group_admin import add_group_argument, group_admin, group_names
from rill.client.cli.groups_describe import add_describe
from rill.client.cli.groups_reset import add_rewind
from rill.client.cli.groups_zookeeper import add_zookeeper_argument, run_list_zookeeper
from rill.client.grpc_client import AdminClient, error_name

__all__ = ["add_parser"]

STRATEGIES = ("range", "roundrobin", "sticky")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("groups", help="list, describe, create, delete or rewind consumer groups",
                              description="Manage consumer groups through their group coordinator "
                                          "(kafka-consumer-groups).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every group with its state, members, topics and coordinator")
    add_admin_arguments(listing)
    add_zookeeper_argument(listing)
    listing.set_defaults(run=run_list)
    add_describe(actions)
    _add_create(actions)
    delete = actions.add_parser("delete", help="delete groups that have no members")
    add_admin_arguments(delete)
    add_group_argument(delete, many=True)
    delete.set_defaults(run=run_delete)
    add_rewind(actions)


def _add_create(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = actions.add_parser("create", help="create a group (consumers also create theirs when they first join)")
    add_admin_arguments(create)
    add_group_argument(create)
    create.add_argument("-t", "--topic", action="append", type=topic_name, default=[],
                        help="a topic the group consumes (repeatable; members may subscribe to their own)")
    create.add_argument("--strategy", choices=STRATEGIES, default="range", help="assignment strategy (default: range)")
    create.add_argument("--session-timeout-ms", type=non_negative_int, default=0, metavar="MS",
                        help="members silent this long are evicted (default: the brokers' default, 0)")
    create.add_argument("--rebalance-timeout-ms", type=non_negative_int, default=0, metavar="MS",
                        help="how long a rebalance waits for members (default: the session timeout, 0)")
    create.add_argument("--ephemeral", action="store_true", help="the group goes away when its last member leaves")
    create.add_argument("--if-not-exists", action="store_true", help="a group that exists already is not an error")
    create.set_defaults(run=run_create)


def run_list(args: argparse.Namespace) -> int:
    if args.zookeeper:
        return run_list_zookeeper(args)
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
        groups = client.list_groups().groups_info
    print("GROUP\tSTATE\tGENERATION\tMEMBERS\tTOPICS\tCOORDINATOR")
    for g in sorted(groups, key=lambda g: g.group_name):
        coordinator = f"{g.controller_broker.broker_id}@{g.controller_broker.host}:{g.controller_broker.port}"
        print(f"{g.group_name}\t{g.state}\t{g.generation}\t{len(g.group_members)}\t{','.join(g.topics)}\t{coordinator}")
    return 0


def run_create(args: argparse.Namespace) -> int:
    """CreateGroup (any broker forwards it to the coordinator), after ListGroups says the name is free: the
    answer alone cannot tell a new group from an existing one with the same settings."""
    group = group_names(args)[0]
    with group_admin(args, group) as found:
        if found.exists:
            if not args.if_not_exists:
                raise CliError(f"group {group!r} already exists (--if-not-exists: not an error)")
            info(f"Group {group} already exists.")
            return 0
        response = found.admin.create_group(group, args.topic, session_timeout_ms=args.session_timeout_ms,
                                            strategy=args.strategy, ephemeral=args.ephemeral,
                                            rebalance_timeout_ms=args.rebalance_timeout_ms)
    if response.error_code:
        raise CliError(f"group {group!r} not created: {error_name(response.error_code)}")
    c = response.coordinator
    print(f"Created group {group} (coordinator broker {c.broker_id}, {c.host}:{c.port}).")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    failed = 0
    for group in group_names(args, many=True):
        with group_admin(args, group) as found:
            if not found.exists:  # ListGroups asked its coordinator: another broker would answer NOT_COORDINATOR
                failed += 1
                print(f"Group {group} not deleted: GROUP_NOT_FOUND")
                continue
            response = found.admin.delete_groups([group])
        for name in response.deleted_consumer_groups:
            print(f"Deleted group {name}.")
        for err in response.errors:
            failed += 1
            print(f"Group {err.consumer_group} not deleted: {error_name(err.error_code)}")
        if response.error_code and not response.errors:
            failed += 1
            print(f"Group {group} not deleted: {error_name(response.error_code)}")
    return 1 if failed else 0

"""``rill acls add|remove|list``: manage ACLs, as ``kafka-acls.sh`` does.

The ACLs are read and written where the brokers keep them (rill.client.security), named
by exactly one of:

- ``--data-dir DIR``: a single broker's ``log.dir``; the ACLs are in
  ``DIR/.security/acls.json``, which the running broker reads again within a second.
- ``--zookeeper HOST:PORT[/chroot]``: a cluster's, in Kafka's ZooKeeper paths; every
  broker applies a change at once.

An ACL is: principal (``--allow-principal`` / ``--deny-principal``, repeatable) from
host (``--allow-host`` / ``--deny-host``, default ``*``) is allowed or denied operation
(``--operation``, repeatable, default All) on resources (``--topic``, ``--group``,
``--cluster``, repeatable) named literally or by prefix (``--resource-pattern-type``).
``--producer`` stands for Write, Describe and Create on the topics; ``--consumer`` for
Read and Describe on the topics and Read on the groups.

``list`` and ``remove`` take the same flags as filters: what a flag leaves out matches
anything (``remove`` without a principal removes every ACL of the resources). Their
``--resource-pattern-type`` may also be ``any`` (any pattern with exactly that name; the
default of ``list``) or ``match`` (every pattern that applies to that name: itself, ``*``
and each prefix). ``remove`` shows what it will remove and asks y/N on a terminal;
otherwise it needs ``--force``.

Output, as kafka-acls prints it::

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:
    \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from rill.client.cli.security_stores import add_store_arguments, zookeeper
from rill.client.cli.common import EXIT_USAGE, CliError, info, positive_float
from rill.client.security.acl_store import AclStore
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acl_store_zk import ZkAclStore
from rill.client.security.acls import (CLUSTER_NAME, WILDCARD_HOST, AccessControlEntry, AclBinding,
                                       AclBindingFilter, BindingList, Operation, PatternType, Permission,
                                       ResourcePattern, ResourceType, by_pattern, check_operation, parse_host,
                                       parse_principal)

__all__ = ["add_parser"]

T = TypeVar("T")
PRODUCER_OPERATIONS = (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)
CONSUMER_TOPIC_OPERATIONS = (Operation.READ, Operation.DESCRIBE)
CONSUMER_GROUP_OPERATIONS = (Operation.READ,)


def _argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a parser raising ValueError (a usage error, exit status 2)."""
    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("acls", help="add, remove or list ACLs (who may do what to topics, groups, the "
                                           "cluster)", description="Manage ACLs, as kafka-acls.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="allow or deny principals operations on resources")
    _common_arguments(add, ("literal", "prefixed"), "literal")
    for flag, what in (("--producer", "Write, Describe and Create on the topics"),
                       ("--consumer", "Read and Describe on the topics, Read on the groups (needs --group)")):
        add.add_argument(flag, action="store_true", help=f"convenience: {what}")
    add.set_defaults(run=run_add)
    remove = actions.add_parser("remove", help="remove the ACLs the flags match (all of a resource without a "
                                               "principal)")
    _common_arguments(remove, ("literal", "prefixed", "any", "match"), "literal")
    remove.add_argument("--producer", action="store_true", help="the operations --producer adds")
    remove.add_argument("--consumer", action="store_true", help="the operations --consumer adds")
    remove.add_argument("--force", action="store_true", help="do not ask for confirmation")
    remove.set_defaults(run=run_remove)
    listing = actions.add_parser("list", help="the ACLs of some resources (default: all)")
    _common_arguments(listing, ("literal", "prefixed", "any", "match"), "any", entry_flags=False)
    listing.add_argument("--principal", action="append", default=[], type=_argument_type(parse_principal),
                         help="only this principal's ACLs (repeatable)")
    listing.set_defaults(run=run_list)


def _common_arguments(parser: argparse.ArgumentParser, pattern_types: tuple[str, ...], default: str,
                      entry_flags: bool = True) -> None:
    add_store_arguments(parser, "ACLs")
    parser.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECONDS",
                        help="how long to wait for ZooKeeper (default: 10)")
    parser.add_argument("--topic", action="append", default=[], help="a topic, prefix or * (repeatable)")
    parser.add_argument("--group", action="append", default=[], help="a group, prefix or * (repeatable)")
    parser.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")
    parser.add_argument("--resource-pattern-type", type=str.lower, choices=pattern_types, default=default,
                        help=f"how --topic and --group names match ({', '.join(pattern_types)}; default: {default})")
    if not entry_flags:
        return
    principal, host = _argument_type(parse_principal), _argument_type(parse_host)
    for verb in ("allow", "deny"):
        parser.add_argument(f"--{verb}-principal", action="append", default=[], type=principal, metavar="TYPE:NAME",
                            help=f"{verb} this principal, User:* for everyone (repeatable)")
        parser.add_argument(f"--{verb}-host", action="append", default=[], type=host, metavar="IP",
                            help=f"the hosts of the --{verb}-principal entries (repeatable; default: *)")
    parser.add_argument("--operation", action="append", default=[], type=_argument_type(Operation.parse),
                        metavar="OP", help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                                           "DescribeConfigs, AlterConfigs or All (repeatable)")


def _usage(message: str) -> CliError:
    return CliError(message, EXIT_USAGE)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    named = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group]
    return named + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else [])


def _patterns(args: argparse.Namespace) -> list[ResourcePattern]:
    """The resources of an ``add`` (the cluster is always literal)."""
    kind = PatternType.parse(args.resource_pattern_type)
    try:
        return [ResourcePattern(t, n, PatternType.LITERAL if t is ResourceType.CLUSTER else kind)
                for t, n in _resources(args)]
    except ValueError as exc:
        raise _usage(str(exc)) from None


def _check_flags(args: argparse.Namespace) -> None:
    """kafka-acls' rules for the entry flags of ``add`` and ``remove``."""
    if not _resources(args):
        raise _usage("name at least one resource: --topic, --group or --cluster")
    for verb in ("allow", "deny"):
        if getattr(args, f"{verb}_host") and not getattr(args, f"{verb}_principal"):
            raise _usage(f"--{verb}-host needs --{verb}-principal")
    if args.producer or args.consumer:
        if args.operation or args.deny_principal:
            raise _usage("--producer and --consumer allow their own operations: no --operation or --deny-principal")
        if not args.topic or args.cluster or (args.consumer and not args.group):
            raise _usage("--producer needs --topic, --consumer --topic and --group (and neither takes --cluster)")


def _operations(args: argparse.Namespace, kind: ResourceType) -> list[Operation]:
    """The operations the flags name for resources of ``kind`` (empty: none named)."""
    if not (args.producer or args.consumer):
        return list(args.operation)
    ops: list[Operation] = []
    if kind is ResourceType.TOPIC:
        ops += PRODUCER_OPERATIONS if args.producer else ()
        ops += CONSUMER_TOPIC_OPERATIONS if args.consumer else ()
    elif kind is ResourceType.GROUP and args.consumer:
        ops += CONSUMER_GROUP_OPERATIONS
    return list(dict.fromkeys(ops))


def _principals(args: argparse.Namespace) -> list[tuple[Permission, str, list[str]]]:
    """(permission, principal, hosts) for each principal flag; hosts empty: none named."""
    return ([(Permission.ALLOW, p, args.allow_host) for p in dict.fromkeys(args.allow_principal)]
            + [(Permission.DENY, p, args.deny_host) for p in dict.fromkeys(args.deny_principal)])


def run_add(args: argparse.Namespace) -> int:
    _check_flags(args)
    if not _principals(args):
        raise _usage("name who: --allow-principal or --deny-principal")
    bindings: BindingList = []
    for pattern in _patterns(args):
        convenience = bool(args.producer or args.consumer)  # their operations, none on other resource types
        ops = [*dict.fromkeys(_operations(args, pattern.type))] or ([] if convenience else [Operation.ALL])
        for op in ops:
            try:
                check_operation(pattern.type, op)
            except ValueError as exc:
                raise _usage(str(exc)) from None
        bindings += [AclBinding(pattern, AccessControlEntry(principal, host, op, permission))
                     for permission, principal, hosts in _principals(args)
                     for host in dict.fromkeys(hosts or [WILDCARD_HOST]) for op in ops]
    with _store(args) as store:
        for pattern, entries in by_pattern(bindings).items():
            _print_entries("Adding ACLs for resource", pattern, entries)
        store.add(bindings)
        _print_current(store, [_exact(p) for p in dict.fromkeys(b.pattern for b in bindings)])
    return 0


def _exact(pattern: ResourcePattern) -> AclBindingFilter:
    return AclBindingFilter(pattern.type, pattern.name, pattern.pattern_type)


def _resource_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """One filter per resource flag (none: every resource), for ``list`` and ``remove``."""
    kind = PatternType.parse(args.resource_pattern_type)
    return [AclBindingFilter(t, n, PatternType.LITERAL if t is ResourceType.CLUSTER and kind is PatternType.PREFIXED
                             else kind) for t, n in _resources(args)] or [AclBindingFilter(pattern_type=kind)]


def _entry_filters(base: AclBindingFilter, args: argparse.Namespace) -> list[AclBindingFilter]:
    """``base`` narrowed by the entry flags of ``remove``: every principal x host x operation named."""
    specs: list[tuple[Permission | None, str | None, list[str]]] = [*_principals(args)] or [(None, None, [])]
    kind = base.resource_type
    named_ops: list[Operation | None] = [*(_operations(args, kind) if kind else args.operation)] or [None]
    if (args.producer or args.consumer) and named_ops == [None]:
        return []  # --producer on a cluster filter: it adds nothing there, so it removes nothing
    return [AclBindingFilter(base.resource_type, base.name, base.pattern_type, principal, host, op, permission)
            for permission, principal, hosts in specs
            for host, op in itertools.product(_or_any(hosts), named_ops)]


def _or_any(hosts: list[str]) -> list[str | None]:
    """The hosts named, or [None] (any host) when none is."""
    return [*dict.fromkeys(hosts)] or [None]


def _matching(store: AclStore, filters: Iterable[AclBindingFilter]) -> BindingList:
    """The store's bindings that any of ``filters`` matches, sorted, without repeats."""
    filters = list(filters)
    return [b for b in store.all() if any(f.matches(b) for f in filters)]


def run_remove(args: argparse.Namespace) -> int:
    _check_flags(args)
    filters = [f for base in _resource_filters(args) for f in _entry_filters(base, args)]
    with _store(args) as store:
        doomed = _matching(store, filters)
        if not doomed:
            info("No ACLs match: nothing removed.")
            return 0
        if not args.force and not _confirmed(doomed):
            info("Nothing removed.")
            return 0
        removed: BindingList = []
        for acl_filter in filters:
            removed += store.remove(acl_filter)
        for pattern, entries in by_pattern(removed).items():
            _print_entries("Removed ACLs for resource", pattern, entries)
        _print_current(store, [_exact(p) for p in dict.fromkeys(b.pattern for b in removed)])
    return 0


def _confirmed(doomed: BindingList) -> bool:
    """Ask y/N on the terminal, showing the ACLs to be removed.

    Raises:
        CliError: stdin is not a terminal (a script must say ``--force``).
    """
    if not sys.stdin.isatty():
        raise _usage("remove asks for confirmation on a terminal: pass --force to remove without asking")
    for pattern, entries in by_pattern(doomed).items():
        _print_entries("Will remove ACLs for resource", pattern, entries, stream=sys.stderr)
    print(f"Are you sure you want to remove these {len(doomed)} ACL(s)? (y/N) ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def run_list(args: argparse.Namespace) -> int:
    filters = _resource_filters(args)
    if args.principal:
        filters = [AclBindingFilter(f.resource_type, f.name, f.pattern_type, principal)
                   for f in filters for principal in dict.fromkeys(args.principal)]
    with _store(args) as store:
        for pattern, entries in by_pattern(_matching(store, filters)).items():
            _print_entries("Current ACLs for resource", pattern, entries)
    return 0


def _print_current(store: AclStore, filters: list[AclBindingFilter]) -> None:
    for pattern, entries in by_pattern(_matching(store, filters)).items():
        _print_entries("Current ACLs for resource", pattern, entries)


def _print_entries(title: str, pattern: ResourcePattern, entries: Iterable[AccessControlEntry],
                   stream: TextIO | None = None) -> None:
    """kafka-acls' block: the title with the pattern, one entry a line after a tab, a blank line."""
    lines = [f"{title} `{pattern}`:", *(f"\t{entry}" for entry in entries), ""]
    print("\n".join(lines), file=stream or sys.stdout)


@contextmanager
def _store(args: argparse.Namespace) -> Iterator[AclStore]:
    """The store the flags name, open for the command (no watching); errors become ``rill: error:`` lines."""
    if args.data_dir is not None:
        if not os.path.isdir(args.data_dir):
            raise CliError(f"no such directory {args.data_dir!r} (--data-dir is the broker's log.dir)")
        with _translated(f"ACL file in {args.data_dir}"):
            store: AclStore = FileAclStore(args.data_dir, poll_interval=None)
        with _closing(store), _translated(f"ACL file in {args.data_dir}"):
            yield store
        return
    with zookeeper(args.zookeeper, args.timeout) as zk:
        with _translated(f"ZooKeeper {args.zookeeper}"):
            store = ZkAclStore(zk, watch=False)
        with _closing(store), _translated(f"ZooKeeper {args.zookeeper}"):
            yield store


@contextmanager
def _closing(store: AclStore) -> Iterator[None]:
    try:
        yield
    finally:
        store.close()


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """OS, ZooKeeper and format errors as one ``rill: error:`` line."""
    try:
        yield
    except (OSError, ValueError) as exc:
        raise CliError(f"{what}: {exc}") from exc
    except (KazooException, KazooTimeoutError) as exc:
        raise CliError(f"{what}: {type(exc).__name__} {exc}".rstrip()) from exc

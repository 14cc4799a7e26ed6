"""The group a ``rill groups`` action names, and the gRPC client of its coordinator.

In a cluster each group has one coordinator broker, and the group RPCs other than
CreateGroup and ListGroups answer NOT_COORDINATOR anywhere else (coordinator/routing.py).
As the consumer does (rill.client.consumer.coordinator_lookup), the commands ask any
broker ``ListGroups([group])``, which names the coordinator, and call it there. A
standalone broker is its own groups' coordinator.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rill.client.cli.bootstrap import admin_address, metadata_brokers
from rill.client.cli.command_config import security_of
from rill.client.cli.common import EXIT_USAGE, CliError
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol import requests as rq
from rill.client.security.client_security import ClientSecurity
from rill.v1 import coordinator_pb2 as pb

__all__ = ["GroupAt", "add_group_argument", "coordinator_address", "group_admin", "group_names"]


class GroupAt:
    """A group's coordinator client (``admin``) and its ListGroups entry (``info``: None when the group does
    not exist; ``admin`` is then the broker that was asked)."""

    __slots__ = ("admin", "info")

    def __init__(self, admin: AdminClient, info: pb.GroupInfo | None) -> None:
        self.admin = admin
        self.info = info

    @property
    def exists(self) -> bool:
        return self.info is not None


@contextmanager
def group_admin(args: argparse.Namespace, group: str) -> Iterator[GroupAt]:
    """The coordinator of ``group``, found through any broker (``--bootstrap-server`` or ``--grpc``).

    Raises:
        CliError: the broker asked knows no coordinator for the group yet (it is moving).
        ConnectionClosed: a broker could not be reached.
    """
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as asked:
        listing = asked.list_groups([group])
        info = listing.groups_info[0] if listing.groups_info else None
        if info is None or info.error_code == pb.GROUP_NOT_FOUND:
            yield GroupAt(asked, None)
            return
        if info.error_code != pb.NONE:
            raise CliError(f"group {group!r}: {error_name(info.error_code)} (its coordinator is moving: try again)")
        security = security_of(args)
        address = coordinator_address(info, security, lambda: metadata_brokers(args))
        if address is None or address == asked.address:
            yield GroupAt(asked, info)
            return
        with AdminClient(address, args.timeout, security=security) as there:
            yield GroupAt(there, info)


def coordinator_address(info: pb.GroupInfo, security: ClientSecurity | None,
                        brokers: Callable[[], Sequence[rq.BrokerInfo]]) -> str | None:
    """The gRPC address of the coordinator ListGroups names in ``info``; None when it names no gRPC port.

    With ``security`` the port is the one METADATA (``brokers()``, asked only then) gives this client's
    listener (TLS: the TLS port), not the plaintext one ListGroups carries.
    """
    coordinator = info.controller_broker
    host, port = coordinator.host, coordinator.grpc_port
    if security is not None:
        known = {b.broker_id: b for b in brokers()}.get(coordinator.broker_id)
        host, port = (known.host, known.grpc_port) if known is not None else (host, port)
    return f"{host}:{port}" if port > 0 else None


def add_group_argument(parser: argparse.ArgumentParser, *, many: bool = False) -> None:
    """The group(s) a command acts on: the argument ``GROUP`` (``GROUP...`` with ``many``) or Kafka's
    ``--group GROUP`` (repeatable with ``many``); read them with :func:`group_names`."""
    parser.add_argument("group", nargs="*" if many else "?", metavar="GROUP")
    parser.add_argument("-g", "--group", dest="group_option", action="append", default=[], metavar="GROUP",
                        help="the group (kafka-consumer-groups' flag; the GROUP argument is the same)")


def group_names(args: argparse.Namespace, *, many: bool = False) -> list[str]:
    """The groups named by :func:`add_group_argument`'s arguments; CliError (usage) for none, or several
    where one is expected."""
    given = args.group if isinstance(args.group, list) else [args.group] if args.group else []
    names = [*given, *args.group_option]
    if not names:
        raise CliError("name the group: GROUP or --group GROUP", EXIT_USAGE)
    if len(names) > 1 and not many:
        raise CliError(f"name one group, not {len(names)}: {', '.join(names)}", EXIT_USAGE)
    return names

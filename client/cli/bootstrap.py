"""Where the ``rill`` commands connect: ``--bootstrap-server`` for all, the gRPC port found through METADATA.

Every command takes ``--bootstrap-server HOST:PORT[,HOST:PORT...]``: brokers' data-plane
addresses, as Kafka's tools and kcat take them. Commands that call a broker's gRPC
services (Admin, GroupCoordinator) ask the first bootstrap broker that answers for
METADATA, whose broker list carries each broker's gRPC port (docs/protocol.md), as the
clients find it (rill.client.cluster_metadata, the consumer's coordinator lookup):
:func:`admin_address`. ``--grpc HOST:PORT`` names a gRPC address directly instead.

A gRPC port given as ``--bootstrap-server`` (or a data port as ``--grpc``) only makes the
connection fail ("closed the connection", "UNAVAILABLE"); :func:`wrong_port_hint`, asked
after such a failure, tries the other protocol on the address and, when it answers, says
which port to give instead.

Blocking calls, each bounded by ``--timeout`` (the hint's probe by :data:`PROBE_TIMEOUT_S`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from rill.client.cli.command_config import security_of
from rill.client.security.client_security import ClientSecurity
from rill.client.cli.common import CliError, add_broker_arguments, positive_float
from rill.client.errors import ConnectionClosed, RillError
from rill.client.grpc_client import AdminClient
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer

__all__ = ["PROBE_TIMEOUT_S", "add_admin_arguments", "add_grpc_arguments", "admin_address", "join_address",
           "own_entry", "wrong_port_hint"]

PROBE_TIMEOUT_S = 3.0
GRPC_ENV = "RILL_GRPC"
DEFAULT_GRPC = "localhost:9093"


def add_admin_arguments(parser: argparse.ArgumentParser, *, timeout: float = 30.0) -> None:
    """``--bootstrap-server`` and ``--timeout`` (as every command; default ``timeout`` seconds), and ``--grpc`` to
    name the gRPC address."""
    add_broker_arguments(parser, timeout=timeout)
    parser.add_argument("--grpc", metavar="HOST:PORT", default=None,
                        help="a broker's gRPC (admin) address, instead of finding it through --bootstrap-server")


def add_grpc_arguments(parser: argparse.ArgumentParser) -> None:
    """``--grpc HOST:PORT`` (default ``$RILL_GRPC`` or localhost:9093) and ``--timeout``: the ``rill perf``
    benchmarks of one broker's coordinator, which measure the gRPC address they are given."""
    parser.add_argument("--grpc", dest="grpc", metavar="HOST:PORT", default=os.environ.get(GRPC_ENV) or DEFAULT_GRPC,
                        help=f"a broker's gRPC address (default: ${GRPC_ENV} or {DEFAULT_GRPC})")
    parser.add_argument("--timeout", type=positive_float, default=30.0, metavar="SECONDS",
                        help="deadline of each call (default: 30)")


def admin_address(args: argparse.Namespace) -> str:
    """The gRPC address to call: ``--grpc`` if given, else the one a bootstrap broker publishes.

    The first bootstrap broker that answers METADATA is used: its own gRPC port (its
    entry has the data port it was reached on: :func:`own_entry`), at the host the
    user gave; failing that, any broker's that serves gRPC, at its advertised host.

    Raises:
        CliError: no broker in the answer serves gRPC.
        ConnectionClosed: no bootstrap broker answered (see :func:`wrong_port_hint`).
    """
    if args.grpc:
        return str(args.grpc)
    host, port, brokers = _metadata_brokers(args.bootstrap, args.timeout, security_of(args))
    own = own_entry(brokers, host, port)
    if own is not None and own.grpc_port > 0:
        return join_address(host, own.grpc_port)
    served = [b for b in brokers if b.grpc_port > 0]
    if not served:
        raise CliError(f"the broker at {host}:{port} names no gRPC port (is it a rill broker with grpc.port set?): "
                       "give --grpc HOST:PORT")
    return join_address(served[0].host, served[0].grpc_port)


def join_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (as gRPC targets and bootstrap.servers write it)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def own_entry(brokers: Sequence[rq.BrokerInfo], host: str, port: int) -> rq.BrokerInfo | None:
    """The entry of the broker reached at ``host:port`` in its METADATA answer: the one with that host and
    data port, else the only one with that port; None when that is ambiguous (hosts named otherwise)."""
    exact = [b for b in brokers if (b.host, b.port) == (host, port)]
    same_port = [b for b in brokers if b.port == port]
    found = exact or same_port
    return found[0] if len(found) == 1 else None


def metadata_brokers(args: argparse.Namespace) -> list[rq.BrokerInfo]:
    """The brokers METADATA names to this command (through ``--bootstrap-server``, with its security)."""
    return _metadata_brokers(args.bootstrap, args.timeout, security_of(args))[2]


def _metadata_brokers(bootstrap: Sequence[tuple[str, int]], timeout: float,
                      security: ClientSecurity | None = None) -> tuple[str, int, list[rq.BrokerInfo]]:
    """(host, port) of the first bootstrap broker that answered METADATA, and its broker list.

    Raises:
        ConnectionClosed: none answered (the one error as it is when there is one address).
    """
    failures: list[RillError] = []
    for host, port in bootstrap:
        try:
            with SimpleConsumer(host, port, timeout=timeout, security=security) as client:
                return host, port, client.metadata([]).brokers
        except RillError as exc:
            failures.append(exc)
    if len(failures) == 1 and isinstance(failures[0], ConnectionClosed):
        raise failures[0]
    raise ConnectionClosed("no broker answered a metadata request: " + "; ".join(str(f) for f in failures))


def wrong_port_hint(args: argparse.Namespace) -> str | None:
    """After a connection failure: a sentence saying that a ``--bootstrap-server`` address is a gRPC port
    (or ``--grpc`` a data port), and which port to give; None when no such mistake is found."""
    grpc = getattr(args, "grpc", None)
    if isinstance(grpc, str) and grpc:
        hint = _data_port_as_grpc(grpc)
        if hint:
            return hint
    for host, port in getattr(args, "bootstrap", None) or ():
        data_port = _grpc_port_as_data(host, port)
        if data_port is not None:
            instead = join_address(host, data_port) if data_port > 0 else "its data port"
            return (f"{join_address(host, port)} is a broker's gRPC port, not its data port: give "
                    f"--bootstrap-server {instead} (every rill command takes the data port and finds the gRPC port "
                    "through it)")
    return None


def _grpc_port_as_data(host: str, port: int) -> int | None:
    """The data port of the broker whose gRPC port is ``host:port`` (0: not named), or None: not a gRPC port."""
    try:
        with AdminClient(join_address(host, port), timeout=PROBE_TIMEOUT_S) as admin:
            brokers = admin.describe_cluster().brokers
    except RillError:
        return None
    return next((b.port for b in brokers if b.grpc_port == port), 0)


def _data_port_as_grpc(address: str) -> str | None:
    """A hint when ``--grpc`` names a data port (it answers METADATA), else None."""
    try:
        host, port = address.rsplit(":", 1)
        with SimpleConsumer(host.strip("[]"), int(port), timeout=PROBE_TIMEOUT_S) as client:
            brokers = client.metadata([]).brokers
    except (RillError, ValueError, OSError):
        return None
    grpc = next((b.grpc_port for b in brokers if b.port == int(port) and b.grpc_port > 0), 0)
    instead = f"--grpc {host}:{grpc}, or " if grpc else ""
    return (f"{address} is a broker's data port, not its gRPC port: give {instead}--bootstrap-server {address} "
            "(the command finds the gRPC port through it)")

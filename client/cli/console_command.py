"""``rill console``: serve the web console of a cluster on this machine (rill.client.console, docs/console.md).

    rill console --bootstrap-server localhost:9092
    rill console: serving http://127.0.0.1:8080/ for the cluster at localhost:9092 (Ctrl-C stops)

It talks to the cluster only through rill's clients, as the other commands do
(``--bootstrap-server``, ``--grpc``, ``--command-config`` for TLS and SASL), listens on
``--host`` (127.0.0.1: this machine only) and ``--port``, samples every group's lag and
every partition's end offset every ``--refresh-seconds`` (the pages refresh as often)
and keeps those samples for ``--lag-window-seconds``. It runs until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rill.client.cli.bootstrap import add_admin_arguments
from rill.client.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, CliError, info, non_negative_int, positive_float
from rill.client.errors import RillError

if TYPE_CHECKING:
    from rill.client.console.console_app import ConsoleSettings

__all__ = ["add_parser", "bootstrap_text", "console_settings"]

DEFAULT_PORT = 8080
TIMEOUT_S = 10.0  # a page waits at most this long for a broker that does not answer


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "console", help="serve a web console: brokers, topics, messages, groups, lag charts, rewinds",
        description="Serve a web console of the cluster on this machine: brokers and their roles, topics and "
                    "partitions, a message browser, consumer groups with their lag (charted over time) and a "
                    "rewind form that shows the plan before anything moves. See docs/console.md.")
    add_admin_arguments(p, timeout=TIMEOUT_S)
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default: 127.0.0.1, this machine only; the console has no login "
                        "of its own: anyone who reaches it acts with --command-config's principal)")
    p.add_argument("--port", type=non_negative_int, default=DEFAULT_PORT,
                   help=f"the port to listen on (default: {DEFAULT_PORT}; 0: any free port, printed)")
    p.add_argument("--refresh-seconds", type=positive_float, default=2.0, metavar="SECONDS",
                   help="how often lag and end offsets are sampled and the pages refresh (default: 2)")
    p.add_argument("--lag-window-seconds", type=positive_float, default=600.0, metavar="SECONDS",
                   help="how long the samples are kept, the span of the lag charts (default: 600)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # imported here: the web stack (Starlette, uvicorn, Jinja2) loads only for this command, not for every `rill`
    from rill.client.console.cluster_access import ClusterAccess
    from rill.client.console.console_app import create_app
    from rill.client.console.console_errors import problem_of
    from rill.client.console.console_server import ConsoleServer

    if args.lag_window_seconds < args.refresh_seconds:
        raise CliError("--lag-window-seconds must be at least --refresh-seconds", EXIT_USAGE)
    access = ClusterAccess(args)  # reads --command-config now: a bad file is an error before anything is served
    bootstrap = bootstrap_text(args)
    try:
        access.metadata()
    except RillError as exc:  # served anyway: the pages say so, and recover when the cluster answers
        info(f"rill console: warning: {problem_of(exc).message}")
    try:
        server = ConsoleServer(create_app(access, console_settings(args)), args.host, args.port)
    except OSError as exc:
        access.close()
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    info(f"rill console: serving {server.url} for the cluster at {bootstrap} (Ctrl-C stops)")
    server.run()
    return EXIT_INTERRUPTED if server.interrupted else 0  # 130 for Ctrl-C, as every rill command


def bootstrap_text(args: argparse.Namespace) -> str:
    """``--bootstrap-server`` as the user wrote it (``host:port,host:port``)."""
    return ",".join(f"{host}:{port}" for host, port in args.bootstrap)


def console_settings(args: argparse.Namespace) -> ConsoleSettings:
    """The console's settings from ``rill console``'s arguments."""
    from rill.client.console.console_app import ConsoleSettings, allowed_hosts

    return ConsoleSettings(args.refresh_seconds, args.lag_window_seconds, bootstrap_text(args), allowed_hosts(args.host))

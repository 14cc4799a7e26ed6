"""The ``rill`` command: produce, consume, topics, groups, perf, spark and console subcommands.

Every command takes ``--bootstrap-server HOST:PORT[,HOST:PORT...]``, brokers' data-plane
addresses; those that need a gRPC port find it through METADATA (rill.client.cli.bootstrap).
The ``rill perf`` benchmarks of one broker's coordinator take its ``--grpc`` address.

Exit codes: 0 success, 1 an error (broker error, unreachable broker, corrupt data),
2 bad usage, 130 interrupted. Expected errors print one ``rill: error: ...`` line on
stderr, never a traceback. Data goes to stdout; summaries and progress to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rill.client.cli import (acl_commands, certs, console_command, consume, groups, perf, produce, quotas, spark, topics,
                             users)
from rill.client.cli.bootstrap import wrong_port_hint
from rill.client.cli.common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, CliError, cli_logging
from rill.client.cli.reset_targets import join_dash_values
from rill.client.errors import AuthenticationFailed, BrokerError, ConnectionClosed, CorruptMessageError, RillError, UnknownTopic
from rill.client.protocol.framing import DecodeError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rill", description="Command-line client for a rill (Kafka 0.7 protocol) broker.")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more on stderr (-v: info, -vv: debug; default: warnings only)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    produce.add_parser(subparsers)
    consume.add_parser(subparsers)
    topics.add_parser(subparsers)
    groups.add_parser(subparsers)
    perf.add_parser(subparsers)
    spark.add_parser(subparsers)
    acl_commands.add_parser(subparsers)
    certs.add_parser(subparsers)
    users.add_parser(subparsers)
    quotas.add_parser(subparsers)
    console_command.add_parser(subparsers)
    return parser


def describe(exc: RillError, args: argparse.Namespace) -> str:
    """One line for an expected error."""
    topic = getattr(args, "topic", None)
    if isinstance(exc, UnknownTopic) and topic:
        return f"topic {topic!r} does not exist"
    if isinstance(exc, BrokerError):
        return f"the broker refused the request: {exc}"
    if isinstance(exc, CorruptMessageError):
        return f"corrupt message, not delivered: {exc}"
    if isinstance(exc, DecodeError):
        return f"malformed response from the broker: {exc}"
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rill`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(join_dash_values(argv))
    except SystemExit as exc:  # argparse: --help (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.argv = argv
    with cli_logging(args.verbose):
        return run(args)


def run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand, turning expected errors into a message and an exit code."""
    try:
        return int(args.run(args))
    except CliError as exc:
        print(f"rill: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConnectionClosed as exc:
        print(f"rill: error: {exc}", file=sys.stderr)
        hint = None if isinstance(exc, AuthenticationFailed) else wrong_port_hint(args)
        if hint:
            print(f"rill: error: {hint}", file=sys.stderr)
        return EXIT_ERROR
    except RillError as exc:
        print(f"rill: error: {describe(exc, args)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # stdout was closed early (rill consume | head): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):  # stdout has no file descriptor (captured in tests)
            pass
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

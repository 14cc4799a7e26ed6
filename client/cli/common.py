"""Pieces shared by the ``rill`` subcommands: broker flags, errors, output helpers."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

import structlog

from rill.client.blocking_connection import parse_address
from rill.client.topic_names import MAX_TOPIC_LENGTH, is_valid_topic

DEFAULT_BROKER = "localhost:9092"
BROKER_ENV = "RILL_BROKER"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: printed as ``rill: error: <message>`` with no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def broker_address(text: str) -> tuple[str, int]:
    """argparse type for ``HOST[:PORT]`` (port 9092 when omitted)."""
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def topic_name(text: str) -> str:
    """argparse type for a topic name (checked before anything is sent)."""
    if not is_valid_topic(text):
        raise argparse.ArgumentTypeError(
            f"invalid topic name {text!r}: use 1-{MAX_TOPIC_LENGTH} of [A-Za-z0-9._-], not '.' or '..'")
    return text


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number >= 1, got 0")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def bootstrap_servers(text: str) -> list[tuple[str, int]]:
    """argparse type for ``HOST[:PORT][,HOST[:PORT]...]`` (Kafka's ``bootstrap.servers``; port 9092 when omitted)."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...], got {text!r}")
    return [broker_address(part) for part in parts]


class _Bootstrap(argparse.Action):
    """Stores the addresses as ``bootstrap`` and the first as ``broker`` (commands that talk to one broker)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        namespace.bootstrap = values
        namespace.broker = values[0]


def add_broker_arguments(parser: argparse.ArgumentParser, *, timeout: float = 30.0) -> None:
    """``--bootstrap-server HOST:PORT[,HOST:PORT...]`` (also ``-b`` and ``--broker``) and ``--timeout`` (default
    ``timeout`` seconds).

    The addresses are brokers' data-plane ports (Kafka's ``--bootstrap-server``): ``args.bootstrap``
    lists them, ``args.broker`` is the first. Commands that need a gRPC port find it through
    METADATA (rill.client.cli.bootstrap).
    """
    default = bootstrap_servers(os.environ.get(BROKER_ENV) or DEFAULT_BROKER)
    parser.add_argument("-b", "--bootstrap-server", "--broker", dest="bootstrap", metavar="HOST:PORT[,HOST:PORT]",
                        type=bootstrap_servers, action=_Bootstrap, default=default,
                        help=f"brokers' data-plane addresses, comma-separated (default: ${BROKER_ENV} or "
                             f"{DEFAULT_BROKER})")
    parser.set_defaults(broker=default[0])
    parser.add_argument("--timeout", type=positive_float, default=timeout, metavar="SECONDS",
                        help=f"socket timeout for connecting and for each response (default: {timeout:g})")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client settings (security.protocol, ssl.*, sasl.*) from a properties or .toml file "
                             "(rill.client.cli.command_config)")


def unknown_topic(topic: str) -> CliError:
    return CliError(f"topic {topic!r} does not exist (create it with: rill topics create --topic {topic} "
                    f"--partitions N)")


def command_line(argv: Sequence[str]) -> str:
    """The command as a user would type it, for benchmark reports."""
    return shlex.join(["rill", *argv])


def info(message: str, stream: TextIO | None = None) -> None:
    """A status line on stderr (stdout carries data)."""
    print(message, file=stream or sys.stderr)


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR, "exception": logging.ERROR,
           "critical": logging.CRITICAL, "fatal": logging.CRITICAL}


def _stderr_logger(*args: Any) -> structlog.PrintLogger:
    return structlog.PrintLogger(sys.stderr)  # looked up per logger: stderr may be replaced (tests)


@contextmanager
def cli_logging(verbosity: int) -> Iterator[None]:
    """Send structlog events to stderr (stdout carries data) while the command runs.

    Warnings and errors only by default; ``-v`` adds info, ``-vv`` debug. The previous
    structlog configuration is restored afterwards, so calling ``main()`` in-process
    (tests) leaves global logging as it was.
    """
    threshold = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)

    def drop_below_threshold(logger: Any, method_name: str,
                             event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        if _LEVELS.get(method_name, logging.INFO) < threshold:
            raise structlog.DropEvent
        return event_dict

    was_configured = structlog.is_configured()
    saved = structlog.get_config()
    structlog.configure(
        processors=[drop_below_threshold, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"), structlog.dev.ConsoleRenderer(colors=False)],
        logger_factory=_stderr_logger, cache_logger_on_first_use=False)
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()

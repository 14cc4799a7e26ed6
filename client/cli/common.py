"""Pieces shared by the ``rill`` subcommands: broker flags, errors, output helpers."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from typing import TextIO

from rill.client.connection import parse_address
from rill.client.errors import ConnectionClosed, UnknownTopic
from rill.client.topics import MAX_TOPIC_LENGTH, is_valid_topic

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


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """``--broker HOST:PORT`` (also ``-b`` and Kafka's ``--bootstrap-server``) and ``--timeout``."""
    default = os.environ.get(BROKER_ENV) or DEFAULT_BROKER
    parser.add_argument("-b", "--broker", "--bootstrap-server", dest="broker", metavar="HOST:PORT",
                        type=broker_address, default=broker_address(default),
                        help=f"broker to connect to (default: ${BROKER_ENV} or {DEFAULT_BROKER})")
    parser.add_argument("--timeout", type=positive_float, default=30.0, metavar="SECONDS",
                        help="socket timeout for connecting and for each response (default: 30)")


def unknown_topic(topic: str, exc: UnknownTopic | None = None) -> CliError:
    return CliError(f"topic {topic!r} does not exist (create it with: rill topics create --topic {topic} "
                    f"--partitions N)")


def connection_error(broker: tuple[str, int], exc: ConnectionClosed) -> CliError:
    return CliError(str(exc) if str(exc) else f"cannot reach broker {broker[0]}:{broker[1]}")


def command_line(argv: Sequence[str]) -> str:
    """The command as a user would type it, for benchmark reports."""
    return shlex.join(["rill", *argv])


def info(message: str, stream: TextIO | None = None) -> None:
    """A status line on stderr (stdout carries data)."""
    print(message, file=stream or sys.stderr)

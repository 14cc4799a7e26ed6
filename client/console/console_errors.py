"""What the console shows when something fails: a :class:`Problem` (kind, plain message, HTTP status).

Every failure a page or a JSON endpoint meets becomes one sentence on the page (and an
``{"error": {...}}`` body), never a traceback:

| kind | status | from |
|---|---|---|
| ``unreachable`` | 503 | ConnectionClosed: no broker answered, a broker or coordinator is down |
| ``authentication`` | 401 | AuthenticationFailed: the console's TLS or SASL settings were refused |
| ``refused`` | 403 | AuthorizationFailed: the brokers' ACLs refuse the console's principal |
| ``not-found`` | 404 | :class:`NotFound`, UnknownTopic: a topic, partition or group that does not exist |
| ``offline`` | 503 | :class:`Offline`: a partition without a live leader |
| ``invalid`` | 400 | :class:`InvalidInput`, CliError, InvalidOffset, OffsetOutOfRange: what the user asked cannot be done |
| ``broker-error`` | 502 | another error code from a broker or coordinator |
| ``internal`` | 500 | anything else (a bug): logged with its traceback on stderr, named on the page |
"""

from __future__ import annotations

from typing import NamedTuple

import structlog

from rill.client.cli.common import CliError
from rill.client.errors import (AuthenticationFailed, AuthorizationFailed, BrokerError, ConnectionClosed,
                                InvalidOffset, OffsetOutOfRange, RillError, UnknownTopic, WrongPartition)

__all__ = ["InvalidInput", "NotFound", "Offline", "Problem", "problem_of"]

log = structlog.get_logger(__name__)


class NotFound(Exception):
    """A topic, partition or group that does not exist (its message says which)."""


class Offline(Exception):
    """A partition without a live leader: its broker is down (its message says which)."""


class InvalidInput(Exception):
    """A form field or query parameter the console cannot use (its message says which and why)."""


class Problem(NamedTuple):
    """A failure as the console shows it."""

    kind: str
    message: str
    status: int

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


def problem_of(exc: BaseException) -> Problem:
    """The :class:`Problem` for ``exc`` (see the module docstring); an unexpected one is logged with its traceback."""
    if isinstance(exc, AuthenticationFailed):
        return Problem("authentication", f"The brokers refused the console's credentials: {exc}", 401)
    if isinstance(exc, ConnectionClosed):
        return Problem("unreachable", f"Broker unreachable: {exc}", 503)
    if isinstance(exc, AuthorizationFailed):
        return Problem("refused", f"Not authorized: {exc}", 403)
    if isinstance(exc, (NotFound, UnknownTopic, WrongPartition)):
        return Problem("not-found", str(exc), 404)
    if isinstance(exc, Offline):
        return Problem("offline", str(exc), 503)
    if isinstance(exc, (InvalidInput, CliError, InvalidOffset, OffsetOutOfRange)):
        return Problem("invalid", str(exc), 400)
    if isinstance(exc, BrokerError):
        return Problem("broker-error", f"The broker refused the request: {exc}", 502)
    if isinstance(exc, RillError):
        return Problem("broker-error", str(exc), 502)
    log.error("console.internal_error", error=repr(exc), exc_info=exc)
    return Problem("internal", f"Internal error in the console ({type(exc).__name__}: {exc}); see its log", 500)

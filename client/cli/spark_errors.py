"""The expected failures of ``rill spark load`` and ``rill spark audit``, as one ``rill: error:`` line.

An expected failure is one a user causes or meets in normal operation: a bad option or
topic, a broker that cannot be reached, offsets deleted by retention
(``DataLossError``), another loader on the output, an ``--out`` that cannot be created
or written. :func:`expected_failure` turns it into a :class:`CliError` (the command prints
``rill: error: <message>`` and exits 1); the traceback is logged at info level, so ``-v``
shows it. When the error was raised inside Spark (a planning or task failure, wrapped
in pyspark's exception with a Python traceback in its text), the message is rill's own
last error line from that text, not Spark's wrapper. Anything else (a bug) keeps its
traceback.
"""

from __future__ import annotations

import re

import structlog

from rill.client.cli.common import CliError
from rill.client.errors import RillError

__all__ = ["expected_failure", "spark_message"]

log = structlog.get_logger(__name__)

# The last line of a Python traceback inside a Spark error's text, for rill's own exceptions.
_RILL_ERROR = re.compile(r"^rill\.client\.[\w.]+\.(\w+(?:Error|Conflict|Locked|Moved|Range|Closed)): (.+)$", re.M)


def spark_message(text: str) -> str | None:
    """rill's error message inside the text of a pyspark exception (the last one), or None."""
    found = _RILL_ERROR.findall(text)
    return found[-1][1].strip() if found else None


def _spark_exception(exc: BaseException) -> bool:
    try:
        from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException
    except ImportError:
        return False
    return isinstance(exc, (PySparkException, Py4JJavaError))


def expected_failure(exc: BaseException, command: str) -> CliError | None:
    """The :class:`CliError` to report ``exc`` with (its traceback logged for ``-v``), or None: not expected."""
    message: str | None = None
    if isinstance(exc, (RillError, ValueError, RuntimeError)) and not _spark_exception(exc):
        message = str(exc)
    elif isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        message = f"cannot use{where}: {exc.strerror or exc}"
    elif _spark_exception(exc):
        text = str(exc)
        message = spark_message(text) or text.strip().splitlines()[0]
    if message is None:
        return None
    log.info(f"spark.{command}_failed", exc_info=exc)  # the traceback, under -v
    return CliError(message)

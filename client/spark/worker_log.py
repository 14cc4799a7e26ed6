"""Logging in Spark's Python workers, where nobody configures structlog."""

from __future__ import annotations

import logging
import sys

import structlog

from rill.client.library_logging import is_library_default

__all__ = ["worker_logging"]


def worker_logging() -> None:
    """Log warnings and errors only, to stderr, unless structlog is configured already.

    The source's methods call it: they run in Spark's Python worker processes, where
    nobody configures logging, so rill's events (routed to ``logging`` by
    rill.client.library_logging) would vanish. A process whose structlog is configured
    otherwise (the driver of a rill command, a test) keeps its setup.
    """
    if not structlog.is_configured() or is_library_default():
        structlog.reset_defaults()  # structlog's own processors, printing warnings and up to stderr
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                            logger_factory=structlog.PrintLoggerFactory(sys.stderr))

"""Logging in Spark's Python workers, where nobody configures structlog."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["worker_logging"]


def worker_logging() -> None:
    """Log warnings and errors only, to stderr, unless structlog is configured already.

    The source's methods call it: they run in Spark's Python worker processes, where
    structlog's default would print every debug event on stdout. A process whose
    structlog is configured (the driver of a rill command, a test) keeps its setup.
    """
    if not structlog.is_configured():
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                            logger_factory=structlog.PrintLoggerFactory(sys.stderr))

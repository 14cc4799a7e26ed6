"""The client library is quiet until the application asks: its events go to the ``logging`` module.

rill's modules log with structlog (``structlog.get_logger(__name__)``, events such as
``producer.metadata_updated`` with key-value fields). structlog's own default prints
every event, debug included, to stdout, which a library must never do to an application.
So importing ``rill.client`` routes structlog through the standard library (structlog's
stdlib integration), **unless structlog is configured already** (an application of its
own, the ``rill`` CLI and ``rill-broker``, which send events to stderr themselves):

- each event goes to the ``logging`` logger named after the module that logged it
  (``rill.client.producer.metadata_updater``, ...), at its level, as the message
  ``"<event> key=value ..."``; the event name and the fields are also on the record
  (``record.event``, ``record.fields``) for a formatter that wants them;
- the ``rill`` logger has a ``NullHandler``, so nothing is printed (not even warnings,
  through logging's last-resort handler) until the application configures logging,
  e.g. ``logging.basicConfig(level=logging.INFO)`` or a handler on ``"rill"``;
- events below the logger's level are dropped before anything is formatted.

An application that configures structlog after importing rill gets rill's events its
own way, as structlog's configuration is global.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ["LIBRARY_LOGGER", "is_library_default", "route_to_stdlib"]

LIBRARY_LOGGER = "rill"
_routed = False  # structlog's configuration is the one route_to_stdlib made


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
           "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL, "fatal": logging.CRITICAL}


def _below_level(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Drop an event its ``logging`` logger would not emit, before anything is formatted."""
    enabled = getattr(logger, "isEnabledFor", None)
    if enabled is not None and not enabled(_LEVELS.get(method_name, logging.INFO)):
        raise structlog.DropEvent
    return event_dict


def _to_log_call(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any] | str:
    """The keyword arguments of the ``logging`` call: the message, and the fields as record attributes.

    A logger that is not a ``logging.Logger`` (someone swapped structlog's logger factory
    and kept these processors) gets the message alone.
    """
    event = str(event_dict.pop("event", ""))
    exc_info = event_dict.pop("exc_info", None)
    fields = dict(event_dict)
    text = " ".join([event, *(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in fields.items())])
    if not isinstance(logger, logging.Logger):
        return text
    call: dict[str, Any] = {"msg": text, "extra": {"event": event, "fields": fields}}
    if exc_info:
        call["exc_info"] = exc_info
    return call


def route_to_stdlib() -> None:
    """Send structlog's events to ``logging`` if nobody configured structlog (see the module docstring)."""
    global _routed
    logging.getLogger(LIBRARY_LOGGER).addHandler(logging.NullHandler())
    if structlog.is_configured():
        return
    structlog.configure(
        processors=[_below_level, structlog.contextvars.merge_contextvars, _to_log_call],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    _routed = True


def is_library_default() -> bool:
    """Is structlog configured only by :func:`route_to_stdlib` (no application or program set it since)?"""
    return _routed and structlog.get_config()["logger_factory"].__class__ is structlog.stdlib.LoggerFactory

"""The worker loop of a ZooKeeper watcher thread: work each time it is woken, until stopped.

Kazoo calls watches and state listeners on its own thread, where nothing may block; so
they only set an Event, and one worker thread does the reads and writes. A ZooKeeper
error (connection loss, session expiry, a timeout) is logged and retried after a short
backoff: the worker wakes itself again. Used by the broker's registration
(rill.broker.cluster.registration) and by the clients' registry view (registry.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog
from kazoo.exceptions import KazooException

RETRY_BACKOFF_S = 0.5

log = structlog.get_logger(__name__)


def run_when_woken(stopping: threading.Event, wake: threading.Event, step: Callable[[], None], *,
                   failed: str, backoff_s: float = RETRY_BACKOFF_S, **fields: Any) -> None:
    """Call ``step()`` after each ``wake``, until ``stopping`` is set.

    A KazooException from ``step`` logs the event ``failed`` (with ``fields``) and wakes
    again after ``backoff_s``; any other exception is logged with its traceback and also
    retried, so the thread never dies.
    """
    while not stopping.is_set():
        wake.wait()
        wake.clear()
        if stopping.is_set():
            return
        try:
            step()
        except KazooException as exc:
            log.warning(failed, error=repr(exc), **fields)
        except Exception:
            log.exception(failed, **fields)
        else:
            continue
        stopping.wait(backoff_s)
        wake.set()

"""The scrubber: a background thread that re-reads every segment and checks every message.

Disks rot: a byte flipped on disk after a message was written is otherwise found
only when a consumer reads it (ZFS and HDFS scrub for the same reason). The scrubber
walks every log's segments, oldest first, and checks each message's length and CRC
(integrity.py) at no more than ``log.scrub.bytes.per.second``. A corrupt range it
finds is recorded on the segment, so reads refuse it from then on, logged
(``log.corrupt_data``, with the file and position) and passed to the log manager's
``on_corruption`` hook. Bytes it checks count as verified, so reads need not check
them again.

A pass starts at start-up and then every ``log.scrub.interval.hours`` (or as soon as
the previous one ends, if it took longer); each pass logs ``scrub.pass_completed``
with what it read and found. It reads the bytes that existed when it reached a
segment: appends made meanwhile are checked by the next pass (they were checked when
appended). A segment deleted by retention meanwhile is skipped.

Thread-safety: it only reads files and adds ranges to segments' integrity records
(copy-on-write); :meth:`Scrubber.stop` may be called from any other thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import structlog

from rill.broker.log.integrity import CorruptRange, corrupt_range_at, verify_messages
from rill.broker.log.log import Log
from rill.broker.log.segment import Segment

CHUNK_BYTES = 1024 * 1024
_logger = structlog.get_logger(__name__)


class Scrubber(threading.Thread):
    """Checks every segment of ``logs()`` at ``bytes_per_second``, a pass every ``interval_s``."""

    def __init__(self, logs: Callable[[], list[Log]], bytes_per_second: int, interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(name="rill-log-scrubber", daemon=True)
        if bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be positive, got {bytes_per_second}")
        self._logs = logs
        self.bytes_per_second = bytes_per_second
        self.interval_s = interval_s
        self._clock = clock
        self._stop_event = threading.Event()
        self.bytes_checked = 0
        self.passes = 0
        self.corrupt_found = 0

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        while not self._stop_event.is_set():
            started = self._clock()
            try:
                self.scrub_pass()
            except Exception:  # a bug must not end scrubbing for good
                _logger.exception("scrub.pass_failed")
            self._stop_event.wait(max(0.0, started + self.interval_s - self._clock()))

    def scrub_pass(self) -> None:
        """Check every segment of every log once (throttled); log what the pass did."""
        started, checked, found, segments = self._clock(), self.bytes_checked, self.corrupt_found, 0
        for log in self._logs():
            for segment in log.segments:
                if self._stop_event.is_set():
                    return
                self._scrub_segment(log, segment)
                segments += 1
        self.passes += 1
        _logger.info("scrub.pass_completed", segments=segments, bytes=self.bytes_checked - checked,
                     corrupt_ranges=self.corrupt_found - found, seconds=round(self._clock() - started, 3))

    def _scrub_segment(self, log: Log, segment: Segment) -> None:
        """Check one segment through a descriptor of its own (the open-files cache is for readers)."""
        size = segment.size
        if not size:
            return
        try:
            fd = os.open(segment.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # deleted by retention since the log listed it
            return
        try:
            self._scrub_range(log, segment, fd, size)
        finally:
            os.close(fd)

    def _scrub_range(self, log: Log, segment: Segment, fd: int, size: int) -> None:
        position = 0
        while position < size and not self._stop_event.is_set():
            began = self._clock()
            try:
                valid_end, reason = verify_messages(fd, position, min(size, position + CHUNK_BYTES), size,
                                                    log.config.max_message_size)
            except OSError as exc:
                _logger.warning("scrub.read_failed", file=segment.path, position=position, error=exc.strerror or str(exc))
                return
            segment.integrity.add_verified(position, valid_end)
            self.bytes_checked += valid_end - position
            read = valid_end - position
            if reason:
                end = corrupt_range_at(fd, valid_end, size, log.config.max_message_size)
                self.corrupt_found += 1
                log.found_corrupt(CorruptRange(segment.path, segment.base_offset, valid_end, end, reason))
                read += end - valid_end
                valid_end = end
            position = valid_end
            self._throttle(read, began)

    def _throttle(self, count: int, began: float) -> None:
        """Sleep so that ``count`` bytes since ``began`` keep to ``bytes_per_second``."""
        due = began + count / self.bytes_per_second
        delay = due - self._clock()
        if delay > 0:
            self._stop_event.wait(delay)

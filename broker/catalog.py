"""The coordinator's view of the broker's topics, over the LogManager.

Implements rill.coordinator.catalog's Catalog protocol (the coordinator does not
import the broker). Safe to call from gRPC worker threads: it only reads the
manager's copy-on-write maps and the logs' atomically published offsets.
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.broker.log.manager import LogManager
from rill.client.errors import BrokerError, OffsetOutOfRange


class LogCatalog:
    def __init__(self, logs: LogManager) -> None:
        self.logs = logs

    def topics(self) -> Mapping[str, int]:
        return self.logs.topics()

    def offset_range(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start, log end) of a partition; KeyError when it does not exist."""
        try:
            plog = self.logs.get(topic, partition)
        except BrokerError as exc:
            raise KeyError(f"{topic}-{partition}") from exc
        return plog.start_offset, plog.end_offset

    def check_offset(self, topic: str, partition: int, offset: int) -> None:
        """Raise the broker's error for an offset that is not a message boundary in the log."""
        plog = self.logs.get(topic, partition)
        if offset < plog.start_offset or offset > plog.end_offset:
            raise OffsetOutOfRange(f"{topic}-{partition}: offset {offset} outside "
                                   f"{plog.start_offset}..{plog.end_offset}")
        plog.read(offset, 0)  # raises InvalidOffset when no message starts there

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """An offset at most one index interval before the first message appended at or after the time."""
        plog = self.logs.get(topic, partition)
        found = plog.offsets_before(timestamp_ms, 1)
        return found[0] if found else plog.start_offset

    def append_time_ms(self, topic: str, partition: int, offset: int) -> int | None:
        """Append time of the message at ``offset`` (to one index interval); None at the log end."""
        return self.logs.get(topic, partition).append_time_ms(offset)

"""What the data plane needs of the storage and of the loop: small protocols, typed.

The request handlers, the delayed answers and topic creation see the log storage
(rill.broker.log's :class:`~rill.broker.log.manager.LogManager` and
:class:`~rill.broker.log.log.Log`) only through :class:`PartitionStore` and
:class:`PartitionLog`, and the event loop only through :class:`Loop`; the broker
(rill.broker.broker) hands them the real objects. So a produce can be followed by
types alone: socket -> :class:`~rill.broker.dataplane.server_connection.Connection` ->
:class:`~rill.broker.dataplane.handlers.RequestHandlers` -> :meth:`PartitionLog.append`,
and a fetch back: :meth:`PartitionLog.read` -> :class:`~rill.broker.log.results.FileSlice`
-> rill.client.protocol.fetch_response's parts -> ``os.sendfile``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Protocol, TypeVar

from rill.broker.dataplane.server_connection import Connection
from rill.broker.log.results import AppendInfo, FileSlice
from rill.client.net.timer_heap import Timer

__all__ = ["FlushScheduler", "Loop", "PartitionLog", "PartitionStore"]

T = TypeVar("T")


class PartitionLog(Protocol):
    """One partition's log, as the request handlers use it (rill.broker.log.log.Log)."""

    def append(self, message_set: bytes | bytearray | memoryview) -> AppendInfo: ...

    def read(self, offset: int, max_size: int) -> FileSlice: ...

    def offsets_before(self, time_ms: int, max_number: int) -> list[int]: ...

    def time_entries(self, offset: int, max_entries: int) -> list[tuple[int, int]]: ...

    def when_flushed(self, offset: int, callback: Callable[[], None]) -> None: ...

    def flush(self) -> None: ...

    @property
    def failed(self) -> BaseException | None: ...


class PartitionStore(Protocol):
    """The broker's partitions (rill.broker.log.manager.LogManager)."""

    def get(self, topic: str, partition: int) -> PartitionLog: ...

    def topics(self) -> Mapping[str, int]: ...

    def create_topic_async(self, topic: str, partitions: int) -> Future[int]: ...

    def ensure_topic_async(self, topic: str) -> Future[int]: ...


class FlushScheduler(Protocol):
    """The flusher (rill.broker.log.flusher.Flusher), asked to sync partitions soon."""

    def flush_soon(self, logs: Iterable[PartitionLog]) -> None: ...


class Loop(Protocol):
    """The event loop the data plane runs on (rill.broker.dataplane.server.BrokerServer)."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None: ...

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Run ``work`` on the loop; the future fails with LoopStopped (event_loop.py) once the loop has stopped."""
        ...

    def mark_dirty(self, conn: Connection) -> None: ...

"""The consumer facade: seed 003's single-threaded ``poll()`` consumer.

::

    consumer = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "orders-app"})
    consumer.add_topic("orders")              # partitions assigned by the group coordinator
    consumer.add_topic("audit", 3)            # a static partition: never handed to anyone else
    while True:
        for message in consumer.poll(1.0):
            process(message)
        consumer.commit()

kafka-python's shapes work too: ``Consumer("orders", "audit", group_id="app")`` (topics
subscribed; without ``group_id`` the consumer reads every partition of them itself),
``consumer.assign([TopicPartition("orders", 0)])`` (no
group membership), ``for message in consumer:`` (with ``consumer_timeout_ms``),
``consumer.commit_async(callback=...)``, ``consumer.offsets_for_times({...})``.

This module holds the class with its construction, identity, poll() and its loop,
metrics() (and the snapshot of them for other threads, :mod:`~rill.client.consumer.consumer_snapshot`)
and close(); the other calls come from
:mod:`~rill.client.consumer.subscription_calls` (add_topic, subscribe, assign ...),
:mod:`~rill.client.consumer.positions` (position, seek, pause, log bounds, offsets by
time), :mod:`~rill.client.consumer.group_offsets` (commit, commit_async, committed,
rewinds) and :mod:`~rill.client.consumer.iteration` (the iterator protocol), on the
shared base :mod:`~rill.client.consumer.calls`.

The pieces: :mod:`~rill.client.consumer.subscription` (what is owned, positions,
pauses), :mod:`~rill.client.consumer.fetcher` (pipelined long-poll fetches),
:mod:`~rill.client.consumer.offset_fetcher` (offsets by time, position resets),
:mod:`~rill.client.consumer.metadata_refresh` (when metadata is refreshed),
:mod:`~rill.client.consumer.group_client` (the coordinator client) and
:mod:`~rill.client.net.selector_loop` (the one wait, over :mod:`~rill.client.net.broker_socket` connections).

Not thread-safe: one thread calls every method (the gRPC library's own threads only
wake the loop). The one exception is ``metrics_snapshot``, which any thread may read.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

import structlog

from rill.client.consumer.consumer_snapshot import ConsumerSnapshot, Counters, EndOffsets, next_snapshot, take_snapshot
from rill.client.consumer.errors import NoOffsetForPartition
from rill.client.consumer.fetcher import FetchConfig, Fetcher
from rill.client.consumer.group_client import GroupClient
from rill.client.consumer.group_offsets import GroupOffsetCalls
from rill.client.consumer.iteration import IterationCalls
from rill.client.consumer.membership import STABLE
from rill.client.consumer.metadata_refresh import MetadataRefresh
from rill.client.consumer.offset_fetcher import OffsetFetcher
from rill.client.consumer.positions import PositionCalls
from rill.client.consumer.settings import consumer_settings, split_arguments
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.consumer.subscription_calls import SubscriptionCalls
from rill.client.errors import ConnectionClosed, RillError
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.security.client_security import from_settings
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import Message
from rill.client.net.selector_loop import SelectorLoop
from rill.client.topic_names import validate_topic

log = structlog.get_logger(__name__)

Callback = Callable[[list[TopicPartition]], None]


class Consumer(SubscriptionCalls, PositionCalls, GroupOffsetCalls, IterationCalls):
    """Consume messages from rill brokers, alone or as a member of a consumer group.

    ``Consumer(*topics, config=None, on_assign=None, on_revoke=None, **settings)``:
    settings are Kafka's names with dots in ``config`` or underscores as keywords
    (``group_id="app"``); see :mod:`rill.client.consumer.settings` and
    docs/clients.md. Positional arguments are topic names (str), then at most one
    config mapping, last: ``Consumer({"group.id": "app"})``, ``Consumer("a", "b",
    group_id="app")`` (kafka-python's ``KafkaConsumer(*topics, **configs)``) and
    ``Consumer("a", {"group.id": "app"})``. The topics are subscribed as
    ``subscribe(topics)`` would. ``on_assign(partitions)`` runs inside poll() after a rebalance
    gave this consumer its partitions (positions are set: you may seek);
    ``on_revoke(partitions)`` runs inside poll() before a rebalance takes them
    away (you may still commit). Neither runs when the member is evicted.

    Without ``group.id`` (kafka-python's ``group_id=None``) there is no coordinator:
    ``subscribe()`` (and constructor topics) read every partition of the subscribed
    topics, static partitions (``add_topic(topic, partition)``) and manual assignments
    (``assign(partitions)``) are read as given; they start from ``auto.offset.reset``
    and nothing can be committed (keep offsets yourself and seek()).

    Raises:
        ConfigError: an unknown setting or a bad value.
        TypeError: a positional argument that is neither a topic name nor, last, the config.
        InvalidTopic: an illegal topic name.
    """

    def __init__(self, *args: str | Mapping[str, Any] | None, config: Mapping[str, Any] | None = None,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None, **kwargs: Any) -> None:
        topics, config = split_arguments(args, config)
        for topic in topics:
            validate_topic(topic)  # before anything is opened
        settings = consumer_settings(config, kwargs)
        self.config = settings
        self._clock: Callable[[], float] = time.monotonic
        self._max_poll_records: int = settings["max.poll.records"]
        retry_backoff: float = settings["retry.backoff.ms"] / 1000.0
        self._value_deserializer: Callable[[bytes], Any] | None = settings["value.deserializer"]
        self._key_deserializer: Callable[[bytes], Any] | None = settings["key.deserializer"]
        request_timeout = settings["request.timeout.ms"] / 1000.0
        self._subscription = SubscriptionState(settings["auto.offset.reset"])
        self._metadata = ClusterMetadata(settings["bootstrap.servers"], timeout=request_timeout,
                                         security=from_settings(settings))
        self._network = SelectorLoop()
        self._fetcher = Fetcher(self._subscription, self._metadata, self._network, FetchConfig(
            max_bytes=settings["fetch.max.bytes"], max_partition_bytes=settings["max.partition.fetch.bytes"],
            max_wait_ms=settings["fetch.max.wait.ms"], min_bytes=settings["fetch.min.bytes"],
            request_timeout=request_timeout, retry_backoff=retry_backoff, client_id=settings["client.id"]),
            self._clock)
        self._offsets = OffsetFetcher(self._subscription, self._metadata, self._fetcher, self._fetcher.config,
                                      self._clock)
        self._group: GroupClient | None = None
        if settings["group.id"] is not None:
            self._group = GroupClient(settings["group.id"], settings, self._subscription, self._fetcher,
                                      self._metadata, self._network, self._clock, on_assign, on_revoke)
        self._refresh = MetadataRefresh(self._metadata, self._subscription, self._fetcher, self._group,
                                        max_age=settings["metadata.max.age.ms"] / 1000.0, retry_backoff=retry_backoff)
        self._closed = False
        self._stats = {"polls": 0, "records": 0}
        self._waiting: deque[tuple[Message, int]] = deque()  # the iterator's (rill.client.consumer.iteration)
        self._held: dict[TopicPartition, deque[tuple[Message, int]]] = {}
        self._ends = EndOffsets()  # log ends known, for the snapshot's lag
        self._snapshot: ConsumerSnapshot | None = None  # replaced whole, read by other threads
        self._snapshot_due = 0.0  # when poll()'s loop takes the next snapshot
        if topics:
            self.subscribe(topics)

    # ---------------------------------------------------------------- identity

    @property
    def group_id(self) -> str | None:
        return self._group.group if self._group is not None else None

    @property
    def member_id(self) -> str:
        """This member's id in its group ("" while not a member)."""
        return self._group.member_id if self._group is not None else ""

    @property
    def generation(self) -> int:
        """The group generation this consumer's assignment belongs to (0 before the first)."""
        return self._group.generation if self._group is not None else 0

    # ---------------------------------------------------------------- poll

    def poll(self, timeout: float | None = 1.0, *, max_records: int | None = None) -> list[Message]:
        """Run the consumer's loop until messages are available or ``timeout`` seconds pass.

        Each turn: group membership (join, heartbeats when due, rebalances,
        auto-commit), metadata when needed, position resets, then fetches to every
        broker with partitions to fetch, one wait (bounded by the earliest deadline),
        and the responses. Before returning messages it sends the next fetches, so the
        brokers work while you process (pipelining).

        ``timeout`` (seconds; None: until there are messages) bounds only how long
        poll() blocks; call poll() at least every ``session.timeout.ms`` or the group
        evicts this member.

        Returns:
            Up to ``max_records`` (default ``max.poll.records``) messages, in offset
            order within each partition; an empty list when none came in time. Messages
            the iterator (``for message in consumer``) took and has not returned yet come
            first, without a turn of the loop.

        Raises:
            MemberEvicted: once, after this member was removed from its group (it rejoins).
            GroupCoordinatorError: the coordinator refused this consumer's registration.
            NoOffsetForPartition: no committed offset and ``auto.offset.reset`` is "none".
            OffsetOutOfRange: the position left the log and ``auto.offset.reset`` is "none".
            CorruptMessageError: a message failed its CRC or framing check (the messages
                before it were returned; it never is).
            BrokerError: another error for one partition.
            The partition errors are raised by every poll() until the partition is
            seeked (or paused); other partitions wait meanwhile.
            IllegalStateError: the consumer is closed.
        """
        self._check_open()
        limit = self._max_poll_records if max_records is None else max_records
        if limit <= 0:
            raise ValueError(f"max_records must be > 0, got {limit}")
        self._stats["polls"] += 1
        waiting = self._take_waiting(limit)  # messages the iterator took and did not return yet
        if waiting:
            return waiting
        return self._fetch_records(timeout, limit, advance=True)

    def _fetch_records(self, timeout: float | None, limit: int, advance: bool) -> list[Message]:
        """poll()'s loop: up to ``limit`` messages (deserialized), [] after ``timeout`` seconds (None: never).
        ``advance``: move the positions past them (the iterator moves them one by one instead)."""
        fetcher = self._fetcher
        deadline = math.inf if timeout is None else self._clock() + max(timeout, 0.0)
        while True:
            now = self._clock()
            self._maintain(now)
            self._raise_partition_errors()  # before waiting: nothing is fetched for a failed partition
            if fetcher.has_records():
                wait = 0.0
            else:
                fetcher.send_fetches()
                wait = min(deadline, self._next_deadline(now)) - now
            for channel, mask in self._network.wait(min(max(wait, 0.0), 3600.0)):
                fetcher.handle(channel, mask)
            fetcher.check_timeouts()
            records = fetcher.take(limit, advance)
            if records:
                fetcher.send_fetches()
                self._stats["records"] += len(records)
                if now >= self._snapshot_due:
                    self._publish()
                return self._deserialize(records) if self._value_deserializer or self._key_deserializer else records
            now = self._clock()
            if now >= self._snapshot_due:
                self._publish()
            if now >= deadline:
                return []

    def _maintain(self, now: float) -> None:
        if self._group is not None:
            self._group.tick(now)
        self._refresh.maybe_refresh(now)
        self._offsets.reset_positions()

    def _raise_partition_errors(self) -> None:
        missing = self._subscription.missing_offsets()
        if missing:
            raise NoOffsetForPartition(missing)
        errors = self._subscription.errors()
        if errors:
            raise errors[0][1]

    def _next_deadline(self, now: float) -> float:
        deadlines = [self._refresh.next_deadline(now)]
        if self._group is not None:
            deadlines.append(self._group.next_deadline(now))
        fetch = self._fetcher.next_deadline(now)
        if fetch is not None:
            deadlines.append(fetch)
        return min(deadlines)

    def _deserialize(self, records: list[Message]) -> list[Message]:
        value, key = self._value_deserializer, self._key_deserializer
        return [Message(m.topic, m.partition, m.offset, m.next_offset,
                        value(m.value) if value is not None else m.value,
                        key(m.key) if key is not None and m.key is not None else m.key) for m in records]

    # ---------------------------------------------------------------- metrics

    @property
    def metrics_snapshot(self) -> ConsumerSnapshot | None:
        """The figures the consumer last published for other threads (None before the first poll() or
        metrics()): thread-safe, no I/O, never changes once returned. See
        :mod:`~rill.client.consumer.consumer_snapshot` for when it is taken and how fresh its lag is."""
        return self._snapshot

    def _publish(self, owned: bool = True) -> ConsumerSnapshot:
        """Take a snapshot of the figures and publish it (one reference replaced); schedule the next one."""
        start = self._clock()
        group = self._group
        counters = Counters(self._stats["polls"], self._stats["records"], self._buffered_records(),
                            self._fetcher.stats["fetches"], self._fetcher.stats["bytes"],
                            group.stats if group is not None else {},
                            len(group.async_commits) if group is not None else 0, self.generation)
        snapshot = self._snapshot = take_snapshot(self.config["client.id"], self.group_id, counters,
                                                  self._subscription.assignment, self._ends,
                                                  self._fetcher.fetched_to(), owned)
        self._snapshot_due = next_snapshot(start, self._clock() - start)
        return snapshot

    def _buffered_records(self) -> int:
        return self._fetcher.buffered_records() + len(self._waiting) + sum(map(len, self._held.values()))

    def metrics(self) -> dict[str, Any]:
        """Counters and, per owned partition, position, committed offset, end offset and lag.

        ``lag`` is in bytes (offsets are byte positions): the log end offset minus the
        position. It makes one OFFSETS request per owned partition (blocking): call it
        from time to time, not in the hot loop. An end offset that cannot be read is None.
        It also publishes a fresh ``metrics_snapshot`` with these end offsets.
        """
        self._check_open()
        partitions: dict[str, dict[str, int | None]] = {}
        try:
            self._offsets.refresh_leaders(self._subscription.assignment)
        except RillError:
            pass  # those partitions' end offsets are None
        for tp, state in sorted(self._subscription.assignment.items()):
            try:
                end: int | None = self._offsets.offset_for(tp, rq.LATEST_TIME)
            except (RillError, LookupError):
                end = None
            lag = end - state.position if end is not None and state.position is not None else None
            partitions[f"{tp.topic}-{tp.partition}"] = {
                "position": state.position, "committed": state.committed, "end_offset": end, "lag": lag}
            if end is not None:
                self._ends.answered({tp: end})
        self._publish()
        group = self._group
        return {
            "group": self.group_id, "member_id": self.member_id, "generation": self.generation,
            "state": group.state if group is not None else None,
            "polls": self._stats["polls"], "records_returned": self._stats["records"],
            "records_buffered": self._buffered_records(),
            "commits_pending": len(group.async_commits) if group is not None else 0,
            "fetch_requests": self._fetcher.stats["fetches"], "bytes_fetched": self._fetcher.stats["bytes"],
            **(group.stats if group is not None else {}),
            "partitions": partitions,
        }

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """Wait for the pending commit_async() calls (up to ``request.timeout.ms``; their callbacks run
        here), commit (when auto-commit is on) the positions of every message poll() or the iterator
        returned, leave the group (LeaveGroup: the others rebalance at once), close every connection.
        Idempotent.

        Commit and leave failures are logged (``consumer.auto_commit_failed``,
        ``consumer.leave_failed``), not raised; an asynchronous commit still unanswered at the
        deadline gets ConnectionClosed in its callback.
        """
        if self._closed:
            return
        self._closed = True
        self._drop_waiting()
        group = self._group
        try:
            if group is not None:
                group.async_commits.flush(self._clock() + group.request_timeout)
                if group.auto_commit and (group.state == STABLE or self._subscription.manual):
                    group.auto_commit_now(self._clock())
                group.leave()
        finally:
            if group is not None:
                group.async_commits.fail_all(ConnectionClosed("the consumer was closed before the coordinator "
                                                              "answered this commit"))
                group.close()
            self._publish(owned=False)  # the final counters; no partitions: it owns none now
            self._fetcher.close()
            self._offsets.close()
            self._network.close()
            log.info("consumer.closed", group=self.group_id)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

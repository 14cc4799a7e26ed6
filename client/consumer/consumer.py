"""The consumer facade: seed 003's single-threaded ``poll()`` consumer.

::

    consumer = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "orders-app"})
    consumer.add_topic("orders")              # partitions assigned by the group coordinator
    consumer.add_topic("audit", 3)            # a static partition: never handed to anyone else
    while True:
        for message in consumer.poll(1.0):
            process(message)
        consumer.commit()

This module holds the class with its construction, identity, subscription calls,
poll() and its loop, metrics() and close(); the other calls come from
:mod:`~rill.client.consumer.positions` (position, seek, pause, log bounds) and
:mod:`~rill.client.consumer.group_offsets` (commit, committed, rewinds), on the shared
base :mod:`~rill.client.consumer.calls`.

The pieces: :mod:`~rill.client.consumer.subscription` (what is owned, positions,
pauses), :mod:`~rill.client.consumer.fetcher` (pipelined long-poll fetches),
:mod:`~rill.client.consumer.offset_fetcher` (offsets by time, position resets),
:mod:`~rill.client.consumer.metadata_refresh` (when metadata is refreshed),
:mod:`~rill.client.consumer.group_client` (the coordinator client) and
:mod:`~rill.client.net.selector_loop` (the one wait, over :mod:`~rill.client.net.broker_socket` connections).

Not thread-safe: one thread calls every method (the gRPC library's own threads only
wake the loop).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

import structlog

from rill.client.consumer.errors import NoOffsetForPartition
from rill.client.consumer.fetcher import FetchConfig, Fetcher
from rill.client.consumer.group_client import GroupClient
from rill.client.consumer.group_offsets import GroupOffsetCalls
from rill.client.consumer.membership import STABLE
from rill.client.consumer.metadata_refresh import MetadataRefresh
from rill.client.consumer.offset_fetcher import OffsetFetcher
from rill.client.consumer.positions import PositionCalls
from rill.client.consumer.settings import consumer_settings
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.errors import RillError
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import Message
from rill.client.net.selector_loop import SelectorLoop
from rill.client.topic_names import validate_topic

log = structlog.get_logger(__name__)

Callback = Callable[[list[TopicPartition]], None]


class Consumer(PositionCalls, GroupOffsetCalls):
    """Consume messages from rill brokers, alone or as a member of a consumer group.

    ``Consumer(config=None, *, on_assign=None, on_revoke=None, **settings)``: settings
    are Kafka's names with dots in ``config`` or underscores as keywords
    (``group_id="app"``); see :mod:`rill.client.consumer.settings` and
    docs/clients.md. ``on_assign(partitions)`` runs inside poll() after a rebalance
    gave this consumer its partitions (positions are set: you may seek);
    ``on_revoke(partitions)`` runs inside poll() before a rebalance takes them
    away (you may still commit). Neither runs when the member is evicted.

    Without ``group.id`` only static partitions (``add_topic(topic, partition)``)
    can be consumed; they start from ``auto.offset.reset`` and nothing can be
    committed (keep offsets yourself and seek()).

    Raises:
        ConfigError: an unknown setting or a bad value.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *, on_assign: Callback | None = None,
                 on_revoke: Callback | None = None, **kwargs: Any) -> None:
        settings = consumer_settings(config, kwargs)
        self.config = settings
        self._clock: Callable[[], float] = time.monotonic
        self._max_poll_records: int = settings["max.poll.records"]
        retry_backoff: float = settings["retry.backoff.ms"] / 1000.0
        self._value_deserializer: Callable[[bytes], Any] | None = settings["value.deserializer"]
        self._key_deserializer: Callable[[bytes], Any] | None = settings["key.deserializer"]
        request_timeout = settings["request.timeout.ms"] / 1000.0
        self._subscription = SubscriptionState(settings["auto.offset.reset"])
        self._metadata = ClusterMetadata(settings["bootstrap.servers"], timeout=request_timeout)
        self._network = SelectorLoop()
        self._fetcher = Fetcher(self._subscription, self._metadata, self._network, FetchConfig(
            max_bytes=settings["fetch.max.bytes"], max_partition_bytes=settings["max.partition.fetch.bytes"],
            max_wait_ms=settings["fetch.max.wait.ms"], min_bytes=settings["fetch.min.bytes"],
            request_timeout=request_timeout, retry_backoff=retry_backoff), self._clock)
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

    # ---------------------------------------------------------------- subscription

    def add_topic(self, topic: str, partition: int | None = None) -> None:
        """Consume ``topic``: its partitions as the group assigns them, or only ``partition`` (static).

        A static partition is claimed from the coordinator (``static_partitions``) and
        never handed to another member; without ``group.id`` it is simply read. The
        change takes effect in the next poll() (with a group: a rebalance).

        Raises:
            InvalidTopic: an illegal topic name. ValueError: a negative partition.
            IllegalStateError: ``add_topic(topic)`` without ``group.id``, or the consumer is closed.
        """
        self._check_open()
        validate_topic(topic)
        if partition is None:
            group = self._require_group("add_topic(topic) without a partition")
            if topic not in self._subscription.topics:
                self._subscription.topics.add(topic)
                group.request_rejoin(f"subscribed to topic {topic}")
            return
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        tp = TopicPartition(topic, partition)
        if tp in self._subscription.static:
            return
        self._subscription.static.add(tp)
        if self._group is not None:
            self._group.request_rejoin(f"claimed static partition {topic}-{partition}")
        else:
            self._subscription.add_partition(tp)

    def remove_topic(self, topic: str, partition: int | None = None) -> None:
        """Stop consuming ``topic`` (its group-assigned partitions), or the static ``partition`` of it."""
        self._check_open()
        if partition is None:
            if topic in self._subscription.topics and self._group is not None:
                self._subscription.topics.discard(topic)
                self._group.request_rejoin(f"unsubscribed from topic {topic}")
            return
        tp = TopicPartition(topic, partition)
        if tp not in self._subscription.static:
            return
        self._subscription.static.discard(tp)
        if self._group is not None:
            self._group.request_rejoin(f"released static partition {topic}-{partition}")
        else:
            self._subscription.remove_partition(tp)

    def subscribe(self, topics: Iterable[str] = (), *, pattern: str | re.Pattern[str] | None = None) -> None:
        """Replace the group-assigned subscription with ``topics`` and/or the topics matching ``pattern``.

        The pattern must match a whole topic name (``re.fullmatch``); it is matched
        against the cluster's topics now and every ``metadata.max.age.ms``, so a topic
        created later joins the subscription (a rebalance). Static partitions are kept.

        Raises:
            IllegalStateError: no ``group.id``. InvalidTopic: an illegal topic name.
            re.error: a bad pattern.
        """
        self._check_open()
        group = self._require_group("subscribe()")
        names = {validate_topic(t) for t in topics}
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        sub = self._subscription
        changed = names != sub.topics or compiled != sub.pattern
        sub.topics = names
        sub.pattern = compiled
        if compiled is None:
            sub.matched = set()
            self._refresh.stop_matching()
        else:
            self._refresh.match_pattern_soon()
        if changed:
            group.request_rejoin("subscription replaced")

    def unsubscribe(self) -> None:
        """Consume nothing: drop topics, pattern and static partitions (with a group: leave it at the next poll)."""
        self._check_open()
        sub = self._subscription
        sub.topics, sub.pattern, sub.matched = set(), None, set()
        self._refresh.stop_matching()
        sub.static.clear()
        if self._group is not None:
            self._group.request_rejoin("unsubscribed")
        else:
            for tp in list(sub.assignment):
                sub.remove_partition(tp)

    def subscription(self) -> set[str]:
        """Topics whose partitions the group assigns (explicit and pattern-matched)."""
        return self._subscription.subscribed_topics()

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer owns now (empty while it joins or rebalances)."""
        return set(self._subscription.assignment)

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
            order within each partition; an empty list when none came in time.

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
            records = fetcher.take(limit)
            if records:
                fetcher.send_fetches()
                self._stats["records"] += len(records)
                return self._deserialize(records) if self._value_deserializer or self._key_deserializer else records
            if self._clock() >= deadline:
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

    def metrics(self) -> dict[str, Any]:
        """Counters and, per owned partition, position, committed offset, end offset and lag.

        ``lag`` is in bytes (offsets are byte positions): the log end offset minus the
        position. It makes one OFFSETS request per owned partition (blocking): call it
        from time to time, not in the hot loop. An end offset that cannot be read is None.
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
        group = self._group
        return {
            "group": self.group_id, "member_id": self.member_id, "generation": self.generation,
            "state": group.state if group is not None else None,
            "polls": self._stats["polls"], "records_returned": self._stats["records"],
            "records_buffered": self._fetcher.buffered_records(),
            "fetch_requests": self._fetcher.stats["fetches"], "bytes_fetched": self._fetcher.stats["bytes"],
            **(group.stats if group is not None else {}),
            "partitions": partitions,
        }

    # ---------------------------------------------------------------- closing

    def close(self) -> None:
        """Commit (when auto-commit is on) the positions of every message poll() returned, leave the
        group (LeaveGroup: the others rebalance at once), close every connection. Idempotent.

        Commit and leave failures are logged (``consumer.auto_commit_failed``,
        ``consumer.leave_failed``), not raised.
        """
        if self._closed:
            return
        self._closed = True
        group = self._group
        try:
            if group is not None:
                if group.auto_commit and group.state == STABLE:
                    group.auto_commit_now(self._clock())
                group.leave()
        finally:
            if group is not None:
                group.close()
            self._fetcher.close()
            self._offsets.close()
            self._network.close()
            log.info("consumer.closed", group=self.group_id)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

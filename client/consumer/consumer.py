"""The consumer facade: seed 003's single-threaded ``poll()`` consumer.

::

    consumer = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "orders-app"})
    consumer.add_topic("orders")              # partitions assigned by the group coordinator
    consumer.add_topic("audit", 3)            # a static partition: never handed to anyone else
    while True:
        for message in consumer.poll(1.0):
            process(message)
        consumer.commit()

The pieces: :mod:`~rill.client.consumer.subscription` (what is owned, positions,
pauses), :mod:`~rill.client.consumer.fetcher` (pipelined long-poll fetches),
:mod:`~rill.client.consumer.group` (the coordinator client) and
:mod:`~rill.client.consumer.network` (non-blocking sockets, the one wait).

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

from rill.client.consumer.errors import IllegalStateError, NoOffsetForPartition
from rill.client.consumer.fetcher import FetchConfig, Fetcher
from rill.client.consumer.group import STABLE, GroupClient
from rill.client.consumer.network import Network
from rill.client.consumer.settings import consumer_settings
from rill.client.consumer.subscription import EARLIEST, LATEST, SubscriptionState, TopicPartition
from rill.client.errors import RillError
from rill.client.metadata import ClusterMetadata
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import Message
from rill.client.topics import validate_topic
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

PartitionLike = tuple[str, int]
Callback = Callable[[list[TopicPartition]], None]


class Consumer:
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
        self._retry_backoff: float = settings["retry.backoff.ms"] / 1000.0
        self._metadata_max_age: float = settings["metadata.max.age.ms"] / 1000.0
        self._value_deserializer: Callable[[bytes], Any] | None = settings["value.deserializer"]
        self._key_deserializer: Callable[[bytes], Any] | None = settings["key.deserializer"]
        request_timeout = settings["request.timeout.ms"] / 1000.0
        self._subscription = SubscriptionState(settings["auto.offset.reset"])
        self._metadata = ClusterMetadata(settings["bootstrap.servers"], timeout=request_timeout)
        self._network = Network()
        self._fetcher = Fetcher(self._subscription, self._metadata, self._network, FetchConfig(
            max_bytes=settings["fetch.max.bytes"], max_partition_bytes=settings["max.partition.fetch.bytes"],
            max_wait_ms=settings["fetch.max.wait.ms"], min_bytes=settings["fetch.min.bytes"],
            request_timeout=request_timeout, retry_backoff=self._retry_backoff), self._clock)
        self._group: GroupClient | None = None
        if settings["group.id"] is not None:
            self._group = GroupClient(settings["group.id"], settings, self._subscription, self._fetcher,
                                      self._metadata, self._network, self._clock, on_assign, on_revoke)
        self._metadata_retry_at = 0.0
        self._pattern_refresh_at = math.inf
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
            self._pattern_refresh_at = math.inf
        else:
            self._pattern_refresh_at = 0.0  # match at the next poll
        if changed:
            group.request_rejoin("subscription replaced")

    def unsubscribe(self) -> None:
        """Consume nothing: drop topics, pattern and static partitions (with a group: leave it at the next poll)."""
        self._check_open()
        sub = self._subscription
        sub.topics, sub.pattern, sub.matched = set(), None, set()
        self._pattern_refresh_at = math.inf
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
            self._raise_partition_errors()
            if self._clock() >= deadline:
                return []

    def _maintain(self, now: float) -> None:
        if self._group is not None:
            self._group.tick(now)
        self._maybe_refresh_metadata(now)
        self._fetcher.reset_positions()
        self._raise_partition_errors()

    def _raise_partition_errors(self) -> None:
        missing = self._subscription.missing_offsets()
        if missing:
            raise NoOffsetForPartition(missing)
        errors = self._subscription.errors()
        if errors:
            raise errors[0][1]

    def _next_deadline(self, now: float) -> float:
        deadlines = [self._pattern_refresh_at]
        if self._group is not None:
            deadlines.append(self._group.next_deadline(now))
        fetch = self._fetcher.next_deadline(now)
        if fetch is not None:
            deadlines.append(fetch)
        if self._metadata_needed():
            deadlines.append(max(now, self._metadata_retry_at))
        return min(deadlines)

    def _metadata_needed(self) -> bool:
        if self._fetcher.needs_metadata:
            return True
        return any(self._metadata.leader(tp.topic, tp.partition) is None for tp in self._subscription.assignment)

    def _maybe_refresh_metadata(self, now: float) -> None:
        pattern_due = now >= self._pattern_refresh_at
        if not (pattern_due or self._metadata_needed()) or now < self._metadata_retry_at:
            return
        sub = self._subscription
        topics = () if pattern_due else {tp.topic for tp in sub.assignment} | sub.subscribed_topics()
        try:
            self._metadata.refresh(topics)
        except RillError as exc:
            log.warning("consumer.metadata_failed", reason=str(exc), group=self.group_id)
            self._metadata_retry_at = now + self._retry_backoff
            return
        self._fetcher.needs_metadata = False
        self._metadata_retry_at = now + self._retry_backoff
        if pattern_due:
            self._pattern_refresh_at = now + self._metadata_max_age
            if sub.set_matched(self._metadata.topics) and self._group is not None:
                log.info("consumer.pattern_matched", group=self.group_id, topics=sorted(sub.matched))
                self._group.request_rejoin("the pattern matches other topics")

    def _deserialize(self, records: list[Message]) -> list[Message]:
        value, key = self._value_deserializer, self._key_deserializer
        return [Message(m.topic, m.partition, m.offset, m.next_offset,
                        value(m.value) if value is not None else m.value,
                        key(m.key) if key is not None and m.key is not None else m.key) for m in records]

    # ---------------------------------------------------------------- commits

    def commit(self, topic: str | None = None, partition: int | None = None, *,
               offsets: Mapping[PartitionLike, int] | None = None) -> None:
        """Commit positions to the group (blocking: returns when they are durable).

        ``commit()``: every owned partition's position (the offset after the last
        message poll() returned), ``commit(topic)``: those of one topic,
        ``commit(topic, partition)``: one partition's; partitions whose position equals
        what was last committed are skipped (no request when nothing changed).
        ``commit(offsets={(topic, partition): offset})``: exactly these offsets (each
        must be a message boundary, typically a message's ``next_offset``).

        Raises:
            CommitFailed: nothing was stored: the coordinator's error code, per partition
                (NOT_OWNER, UNKNOWN_MEMBER after an eviction, ILLEGAL_GENERATION,
                REBALANCE_IN_PROGRESS after a rewind ...), or this consumer is rejoining.
            IllegalStateError: no ``group.id``; ``commit(topic, partition)`` for a partition
                this consumer does not own; closed.
            ConnectionClosed: the coordinator could not be reached.
        """
        self._check_open()
        group = self._require_group("commit()")
        sub = self._subscription
        if offsets is not None:
            if topic is not None or partition is not None:
                raise ValueError("give either topic/partition or offsets, not both")
            chosen = {TopicPartition(*tp): offset for tp, offset in offsets.items()}
        elif topic is not None and partition is not None:
            tp = TopicPartition(topic, partition)
            if tp not in sub.assignment:
                raise IllegalStateError(f"{topic}-{partition} is not assigned to this consumer "
                                        f"(assigned: {_names(sub.assignment)})")
            chosen = {k: v for k, v in sub.uncommitted().items() if k == tp}
        elif topic is not None:
            chosen = {k: v for k, v in sub.uncommitted().items() if k.topic == topic}
        else:
            if partition is not None:
                raise ValueError("commit(partition=...) needs a topic")
            chosen = sub.uncommitted()
        group.commit(chosen)

    def committed(self, partition: PartitionLike) -> int | None:
        """The group's committed offset of ``partition`` (None when none is committed); blocking.

        Raises:
            IllegalStateError: no ``group.id``. GroupCoordinatorError, ConnectionClosed.
        """
        self._check_open()
        tp = TopicPartition(*partition)
        return self._require_group("committed()").fetch_committed([tp])[tp]

    # ---------------------------------------------------------------- positions

    def position(self, partition: PartitionLike) -> int:
        """The offset of the next message poll() will return for an owned partition.

        A pending reset (``auto.offset.reset``, seek_to_beginning/end) is resolved now
        (blocking, one OFFSETS request).

        Raises:
            IllegalStateError: the partition is not owned. NoOffsetForPartition: no
            position and ``auto.offset.reset`` is "none". BrokerError, ConnectionClosed:
            the lookup failed.
        """
        self._check_open()
        tp = self._owned(partition)
        state = self._subscription.state(tp)
        if state.position is None:
            if state.reset in (EARLIEST, LATEST):
                time_value = rq.EARLIEST_TIME if state.reset == EARLIEST else rq.LATEST_TIME
                self._subscription.seek(tp, self._fetcher.offset_for(tp, time_value))
            else:
                raise NoOffsetForPartition([tp])
        position = self._subscription.state(tp).position
        assert position is not None
        return position

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Make ``offset`` the position of an owned partition (local: nothing is committed).

        The next poll() returns messages from there; anything fetched before is dropped.
        ``offset`` must be a message boundary (a message's ``offset`` or
        ``next_offset``); otherwise poll() raises InvalidOffset for the partition.
        Clears the partition's error, if any.

        Raises:
            IllegalStateError: the partition is not owned. ValueError: a negative offset.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._subscription.seek(self._owned((topic, partition)), offset)

    def seek_to_beginning(self, *partitions: PartitionLike) -> None:
        """Start the owned ``partitions`` (default: all owned) from their earliest offset at the next poll()."""
        self._seek_to(EARLIEST, partitions)

    def seek_to_end(self, *partitions: PartitionLike) -> None:
        """Start the owned ``partitions`` (default: all owned) from their end (only new messages)."""
        self._seek_to(LATEST, partitions)

    def _seek_to(self, strategy: str, partitions: tuple[PartitionLike, ...]) -> None:
        self._check_open()
        chosen = [self._owned(p) for p in partitions] if partitions else list(self._subscription.assignment)
        for tp in chosen:
            self._subscription.request_reset(tp, strategy)

    def pause(self, *partitions: PartitionLike) -> None:
        """Stop fetching and returning the owned ``partitions`` until resume() (messages already
        fetched stay buffered). A rebalance forgets pauses of partitions it takes away."""
        self._check_open()
        self._subscription.pause([self._owned(p) for p in partitions])

    def resume(self, *partitions: PartitionLike) -> None:
        self._check_open()
        self._subscription.resume([TopicPartition(*p) for p in partitions])

    def paused(self) -> set[TopicPartition]:
        return set(self._subscription.paused)

    def beginning_offsets(self, partitions: Iterable[PartitionLike]) -> dict[TopicPartition, int]:
        """The first offset still in each partition's log (blocking OFFSETS requests)."""
        self._check_open()
        return {tp: self._fetcher.offset_for(tp, rq.EARLIEST_TIME) for tp in map(_tp, partitions)}

    def end_offsets(self, partitions: Iterable[PartitionLike]) -> dict[TopicPartition, int]:
        """Each partition's log end offset: where the next message will go (blocking OFFSETS requests)."""
        self._check_open()
        return {tp: self._fetcher.offset_for(tp, rq.LATEST_TIME) for tp in map(_tp, partitions)}

    # ---------------------------------------------------------------- rewind (the whole group)

    def rewind_offsets(self, offsets: Iterable[tuple[str, int, int]]) -> dict[TopicPartition, int]:
        """Move the group's offsets of these partitions, live (seed 003 "Offset Rewind").

        This consumer stops fetching, sends RewindConsumer to the coordinator, and the
        coordinator commits the new offsets and tells the partitions' owners (through
        their heartbeats) to re-register; they resume from the new offsets. When this
        consumer owns some of them it re-registers at its next poll(). Each offset must
        be a message boundary of its partition (or its log end). All move or none does.

        Returns:
            The offset each partition moved to.

        Raises:
            RewindFailed: nothing moved (codes per partition). IllegalStateError: no group.
            ConnectionClosed: the coordinator could not be reached.
        """
        self._check_open()
        entries = [(validate_topic(t), p, o) for t, p, o in offsets]
        if not entries:
            raise ValueError("no partitions to rewind")
        return self._require_group("rewind_offsets()").rewind(entries)

    def rewind_to_time(self, timestamp_ms: int, topics: Iterable[str] | None = None) -> dict[TopicPartition, int]:
        """Rewind the group (see rewind_offsets) to the first message appended at or after
        ``timestamp_ms`` (ms since the epoch), in every partition of ``topics``, or of every
        topic the group consumes when ``topics`` is None. A partition with nothing that
        recent goes to its end.

        Returns, Raises: as rewind_offsets.
        """
        self._check_open()
        group = self._require_group("rewind_to_time()")
        entries: list[tuple[str, int, int]] = []
        if topics is not None:
            names = sorted({validate_topic(t) for t in topics})
            self._metadata.refresh(names)
            for topic in names:
                count = self._metadata.partitions(topic)
                if count is None:
                    raise IllegalStateError(f"topic {topic!r} does not exist")
                entries.extend((topic, p, 0) for p in range(count))
        return group.rewind(entries, target=pb.TIMESTAMP, timestamp_ms=timestamp_ms)

    # ---------------------------------------------------------------- metrics

    def metrics(self) -> dict[str, Any]:
        """Counters and, per owned partition, position, committed offset, end offset and lag.

        ``lag`` is in bytes (offsets are byte positions): the log end offset minus the
        position. It makes one OFFSETS request per owned partition (blocking): call it
        from time to time, not in the hot loop. An end offset that cannot be read is None.
        """
        self._check_open()
        partitions: dict[str, dict[str, int | None]] = {}
        for tp, state in sorted(self._subscription.assignment.items()):
            try:
                end: int | None = self._fetcher.offset_for(tp, rq.LATEST_TIME)
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
            self._network.close()
            log.info("consumer.closed", group=self.group_id)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ---------------------------------------------------------------- helpers

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _require_group(self, what: str) -> GroupClient:
        if self._group is None:
            raise IllegalStateError(f"{what} needs a group.id (this consumer has none: it can only read static "
                                    "partitions, from positions it keeps itself)")
        return self._group

    def _owned(self, partition: PartitionLike) -> TopicPartition:
        tp = _tp(partition)
        if tp not in self._subscription.assignment:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer "
                                    f"(assigned: {_names(self._subscription.assignment)})")
        return tp


def _tp(partition: PartitionLike) -> TopicPartition:
    topic, number = partition
    return TopicPartition(topic, number)


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions)) or "none"

"""The Consumer's calls on its group's offsets: commit, commit_async, committed, and the live rewinds.

commit() and committed() store and read this group's offsets on the coordinator;
commit_async() stores them without blocking (:mod:`~rill.client.consumer.async_commits`);
rewind_offsets() and rewind_to_time() move them for the whole group, live (seed 003's
"Offset Rewind"). All need ``group.id``; all but commit_async() are blocking, each
bounded by ``request.timeout.ms``. The work is
:class:`~rill.client.consumer.group_client.GroupClient`'s, these calls choose the
partitions and offsets. A consumer with a manual assignment (assign()) commits
standalone: accepted only while the group has no live member.

Not thread-safe: see :class:`~rill.client.consumer.consumer.Consumer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rill.client.consumer.async_commits import CommitCallback
from rill.client.consumer.calls import ConsumerCalls, PartitionLike, partition_names, to_tp
from rill.client.consumer.errors import IllegalStateError
from rill.client.consumer.subscription import TopicPartition
from rill.client.topic_names import validate_topic
from rill.v1 import coordinator_pb2 as pb


class GroupOffsetCalls(ConsumerCalls):
    """Commit, committed and rewind calls of the Consumer."""

    def commit(self, topic: str | None = None, partition: int | None = None, *,
               offsets: Mapping[PartitionLike, int] | None = None) -> None:
        """Commit positions to the group (blocking: returns when they are durable).

        ``commit()``: every owned partition's position (the offset after the last
        message poll() returned), ``commit(topic)``: those of one topic,
        ``commit(topic, partition)``: one partition's; partitions whose position equals
        what was last committed are skipped (no request when nothing changed).
        ``commit(offsets={(topic, partition): offset})``: exactly these offsets (each
        must be a message boundary, typically a message's ``next_offset``).

        Earlier commit_async() calls are answered first (their callbacks run here), so
        this commit is never overtaken by an older one.

        Raises:
            CommitFailed: nothing was stored: the coordinator's error code, per partition
                (NOT_OWNER, UNKNOWN_MEMBER after an eviction, ILLEGAL_GENERATION,
                REBALANCE_IN_PROGRESS after a rewind ...; for a manual assignment,
                NOT_OWNER while the group has live members), or this consumer is rejoining.
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
                                        f"(assigned: {partition_names(sub.assignment)})")
            chosen = {k: v for k, v in sub.uncommitted().items() if k == tp}
        elif topic is not None:
            chosen = {k: v for k, v in sub.uncommitted().items() if k.topic == topic}
        else:
            if partition is not None:
                raise ValueError("commit(partition=...) needs a topic")
            chosen = sub.uncommitted()
        group.commit(chosen)

    def commit_async(self, offsets: Mapping[PartitionLike, int] | None = None,
                     callback: CommitCallback | None = None) -> None:
        """Commit without blocking (kafka-python's ``commit_async``).

        ``offsets``: ``{(topic, partition): offset}`` to commit exactly these; None: every
        owned partition's position that changed since the last commit (as ``commit()``).
        The commit is sent now if nothing is ahead of it and the coordinator is known,
        else by the next poll(); commits are sent one at a time, in the order made.
        ``callback(offsets, exception)`` runs inside a later poll(), commit() or close(), on
        this thread: ``exception`` is None when the offsets were stored, else
        CommitFailed (the coordinator's codes, as for commit()) or ConnectionClosed. Without
        a callback a failure is only logged (``consumer.commit_async_failed``). close()
        waits, up to ``request.timeout.ms``, for the commits still pending.

        Raises:
            IllegalStateError: no ``group.id``; closed.
        """
        self._check_open()
        group = self._require_group("commit_async()")
        chosen = {to_tp(tp): offset for tp, offset in offsets.items()} if offsets is not None \
            else self._subscription.uncommitted()
        group.async_commits.submit(chosen, callback)

    def committed(self, partition: PartitionLike) -> int | None:
        """The group's committed offset of ``partition`` (None when none is committed); blocking.

        Raises:
            IllegalStateError: no ``group.id``. GroupCoordinatorError, ConnectionClosed.
        """
        self._check_open()
        tp = TopicPartition(*partition)
        return self._require_group("committed()").fetch_committed([tp])[tp]

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

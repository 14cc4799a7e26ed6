"""What the consumer consumes and where it stands: subscription, assignment, positions, pauses.

- The **subscription** is what the user asked for: topics whose partitions the group
  coordinator assigns (``add_topic(topic)``), topics matching a pattern
  (``subscribe(pattern=...)``, matched against cluster metadata) and static
  partitions (``add_topic(topic, partition)``, never handed to anyone else).
- Without ``group.id`` the subscription is read whole (kafka-python's ``group_id=None``):
  every partition of the subscribed topics (explicit and pattern-matched), tracked in
  ``self_owned`` (topic -> partitions owned) and ``absent`` (subscribed topics not in
  the cluster when last looked for); see :mod:`~rill.client.consumer.self_assignment`.
- Or, instead, a **manual assignment** (``assign(partitions)``, kafka-python's): the
  partitions in ``manual``, read without group membership. The two never mix (the
  consumer's calls refuse it), so ``manual`` is empty whenever there is a subscription.
- The **assignment** is what this consumer owns now: the coordinator's answer, the
  static partitions and the subscription's partitions without a group, or the manual
  partitions. Each owned partition has a :class:`PartitionState`.
- A partition's **position** is the offset of the next message poll() will return
  (Kafka's position): it moves only when poll() returns messages (or the iterator
  yields one), or by seek(). It is ``None`` while a reset (auto.offset.reset,
  seek_to_beginning/end) or, for a manually assigned partition, the lookup of the
  group's committed offset is pending.
- The **epoch** of a partition grows with every seek, reset and (re)assignment; the
  fetcher drops fetched data from an older epoch, so nothing fetched before a seek or
  a rebalance is ever returned after it.

Not thread-safe: owned by the consumer's poll loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rill.client.structs import TopicPartition as TopicPartition  # re-exported: the consumer's modules use it from here
from rill.client.topic_names import is_internal_topic


EARLIEST = "earliest"
LATEST = "latest"
COMMITTED = "committed"  # a manually assigned partition: the group's committed offset, else auto.offset.reset


class PartitionState:
    """One owned partition.

    ``position``: next offset to return, None while ``reset`` (EARLIEST, LATEST or
    COMMITTED) is pending. ``committed``: the offset this consumer last committed or was given by
    the coordinator (None: unknown), used to skip commits that would change nothing.
    ``error``: raised by poll() until the partition is seeked (the fetcher stops
    fetching it meanwhile). ``epoch``: see the module docstring.
    """

    __slots__ = ("position", "reset", "committed", "error", "epoch")

    def __init__(self, epoch: int) -> None:
        self.position: int | None = None
        self.reset: str | None = None
        self.committed: int | None = None
        self.error: BaseException | None = None
        self.epoch = epoch

    def __repr__(self) -> str:
        return (f"PartitionState(position={self.position}, reset={self.reset}, committed={self.committed}, "
                f"error={self.error!r}, epoch={self.epoch})")


class SubscriptionState:
    """Subscription, assignment, positions and pauses; see the module docstring."""

    def __init__(self, default_reset: str) -> None:
        self.default_reset = default_reset  # "earliest", "latest" or "none"
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.matched: set[str] = set()
        self.static: set[TopicPartition] = set()
        self.pattern_matched = False  # the pattern was matched against the cluster's topics at least once
        self.manual: set[TopicPartition] = set()
        self.self_owned: dict[str, int] = {}  # without a group: topic -> partitions 0..n-1 of it owned
        self.absent: set[str] = set()  # without a group: subscribed topics the cluster did not have
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.paused: set[TopicPartition] = set()
        self._epoch = 0

    # ---------------------------------------------------------------- subscription

    def subscribed_topics(self) -> set[str]:
        """Subscribed topics, explicit and pattern-matched (with a group the coordinator assigns their
        partitions; without one this consumer owns them all)."""
        return self.topics | self.matched

    def has_subscription(self) -> bool:
        """Is there anything for the group to assign (makes the consumer a member)?

        A pattern counts once it was matched, even when it matched nothing: the member
        then takes part in the group's generations, so the coordinator knows the topics
        that appear later are new to the group (they start at their beginning).
        """
        return bool(self.topics or self.matched or self.static or (self.pattern is not None and self.pattern_matched))

    def set_matched(self, all_topics: Iterable[str]) -> bool:
        """Match the pattern against the cluster's topics; True when the matched set changed."""
        if self.pattern is None:
            changed = bool(self.matched)
            self.matched = set()
            return changed
        self.pattern_matched = True
        matched = {t for t in all_topics if self.pattern.fullmatch(t) and not is_internal_topic(t)}  # as Kafka's
        # exclude.internal.topics: a pattern never subscribes to __rill_groups
        changed = matched != self.matched
        self.matched = matched
        return changed

    # ---------------------------------------------------------------- assignment

    def _next_epoch(self) -> int:
        self._epoch += 1
        return self._epoch

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Own exactly these partitions, starting from the given offsets (-1: apply the reset policy).

        Replaces the whole assignment (every partition gets a new epoch); pauses of
        partitions no longer owned are forgotten.
        """
        self.assignment = {}
        for tp, offset in offsets.items():
            state = PartitionState(self._next_epoch())
            if offset >= 0:
                state.position = state.committed = offset
            else:
                state.reset = self.default_reset
            self.assignment[tp] = state
        self.paused &= set(self.assignment)

    def add_partition(self, tp: TopicPartition, reset: str | None = None) -> None:
        """Own one more partition (static partitions without a group, manual assignments), starting from
        ``reset`` (default: the reset policy; COMMITTED: the group's committed offset first)."""
        if tp not in self.assignment:
            state = self.assignment[tp] = PartitionState(self._next_epoch())
            state.reset = reset or self.default_reset

    def remove_partition(self, tp: TopicPartition) -> None:
        self.assignment.pop(tp, None)
        self.paused.discard(tp)

    def revoke_all(self) -> list[TopicPartition]:
        """Own nothing (a rebalance began, or the member was evicted); returns what was owned."""
        revoked = sorted(self.assignment)
        self.assignment = {}
        return revoked

    def state(self, tp: TopicPartition) -> PartitionState:
        """The partition's state. Raises KeyError when it is not assigned."""
        return self.assignment[tp]

    # ---------------------------------------------------------------- positions

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Set the position (clears a pending reset and a partition error)."""
        state = self.assignment[tp]
        state.position, state.reset, state.error = offset, None, None
        state.epoch = self._next_epoch()

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        """Forget the position; the consumer looks up the earliest or latest offset before fetching."""
        state = self.assignment[tp]
        state.position, state.reset, state.error = None, strategy, None
        state.epoch = self._next_epoch()

    def fail(self, tp: TopicPartition, error: BaseException) -> None:
        """Stop fetching the partition; poll() raises ``error`` until it is seeked."""
        state = self.assignment[tp]
        state.error = error
        state.epoch = self._next_epoch()

    def advance(self, tp: TopicPartition, next_offset: int) -> None:
        """Messages up to ``next_offset`` were returned by poll()."""
        self.assignment[tp].position = next_offset

    def needs_reset(self) -> list[TopicPartition]:
        """Owned partitions whose position must be looked up (reset policy earliest/latest)."""
        return [tp for tp, s in self.assignment.items() if s.position is None and s.reset in (EARLIEST, LATEST)
                and s.error is None]

    def needs_committed(self) -> list[TopicPartition]:
        """Manually assigned partitions waiting for the group's committed offset."""
        return [tp for tp, s in self.assignment.items() if s.position is None and s.reset == COMMITTED
                and s.error is None]

    def missing_offsets(self) -> list[TopicPartition]:
        """Owned partitions with no position and reset policy "none"."""
        return [tp for tp, s in self.assignment.items() if s.position is None and s.reset == "none"
                and s.error is None]

    def fetchable(self, tp: TopicPartition) -> bool:
        """Owned, not paused, with a position and no error."""
        state = self.assignment.get(tp)
        return (state is not None and state.position is not None and state.error is None
                and tp not in self.paused)

    def errors(self) -> list[tuple[TopicPartition, BaseException]]:
        """Partition errors poll() must raise (paused partitions excepted)."""
        return [(tp, s.error) for tp, s in self.assignment.items() if s.error is not None and tp not in self.paused]

    def positions(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Known positions of owned partitions (all of them, or of ``partitions``)."""
        wanted = self.assignment if partitions is None else [tp for tp in partitions if tp in self.assignment]
        out = {}
        for tp in wanted:
            position = self.assignment[tp].position
            if position is not None:
                out[tp] = position
        return out

    def uncommitted(self) -> dict[TopicPartition, int]:
        """Positions that differ from what was last committed (what an auto-commit sends)."""
        return {tp: s.position for tp, s in self.assignment.items()
                if s.position is not None and s.position != s.committed}

    def mark_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            state = self.assignment.get(tp)
            if state is not None:
                state.committed = offset

    # ---------------------------------------------------------------- pause

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self.paused.update(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.paused.difference_update(partitions)

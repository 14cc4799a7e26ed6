"""The Consumer's calls that choose what it reads: a group subscription, or a manual assignment.

Two ways, never mixed (kafka-python raises IllegalStateError too):

- **Subscription** (seed 003's API): ``add_topic(topic)`` and ``subscribe(topics,
  pattern)`` let the group coordinator assign the partitions; ``add_topic(topic,
  partition)`` claims a static partition. With ``group.id`` each is group membership:
  the consumer registers, heartbeats, rebalances, and commits as a member (a static
  partition is registered with the coordinator and never handed to another member).
  Topics given to the constructor (``Consumer("a", "b", ...)``) are subscribed as
  ``subscribe(["a", "b"])`` would.
- **Manual assignment** (kafka-python's ``assign(partitions)``, Kafka's standalone
  consumer): exactly these partitions, with no group membership at all, even with
  ``group.id`` (which then only stores offsets: commits are standalone, accepted while
  the group has no live member). Positions start from the group's committed offsets,
  else ``auto.offset.reset``.

Without ``group.id`` (kafka-python's ``group_id=None``) there is no coordinator and no
commits: ``subscribe()`` makes the consumer own every partition of the subscribed topics
(and pattern matches) itself, picking up topics and partitions that appear later at the
next metadata refresh (:mod:`~rill.client.consumer.self_assignment` says where each
starts); ``add_topic(topic, partition)`` and ``assign()`` just read the partitions.
``add_topic(topic)`` alone still needs a ``group.id``: it is seed 003's group call, and a
program using it without a group has most likely forgotten the group (it would read
everything and commit nothing); ``subscribe([topic])`` is the explicit way. Subscription
and manual assignment still do not mix, so that a program keeps one meaning when a
``group.id`` is added later. ``unsubscribe()`` ends either.

Not thread-safe: see :class:`~rill.client.consumer.consumer.Consumer`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rill.client.consumer.calls import ConsumerCalls, PartitionLike, to_tp
from rill.client.consumer.errors import IllegalStateError
from rill.client.consumer.self_assignment import owns_topic, release_unsubscribed
from rill.client.consumer.subscription import COMMITTED, TopicPartition
from rill.client.topic_names import validate_topic


class SubscriptionCalls(ConsumerCalls):
    """add_topic, remove_topic, subscribe, unsubscribe, assign and their views."""

    def _check_not_manual(self, what: str) -> None:
        if self._subscription.manual:
            raise IllegalStateError(f"{what} cannot be mixed with assign(): this consumer reads a manual "
                                    "assignment; call unsubscribe() first")

    def add_topic(self, topic: str, partition: int | None = None) -> None:
        """Consume ``topic``: its partitions as the group assigns them, or only ``partition`` (static).

        A static partition is claimed from the coordinator (``static_partitions``) and
        never handed to another member; without ``group.id`` it is simply read. The
        change takes effect in the next poll() (with a group: a rebalance).

        Raises:
            InvalidTopic: an illegal topic name. ValueError: a negative partition.
            IllegalStateError: ``add_topic(topic)`` without ``group.id`` (use ``subscribe([topic])``
                to read every partition without a group, or add the group you forgot); the
                consumer has a manual assignment (assign()); it is closed.
        """
        self._check_open()
        self._check_not_manual("add_topic()")
        validate_topic(topic)
        if partition is None:
            group = self._group
            if group is None:
                raise IllegalStateError("add_topic(topic) needs a group.id (this consumer has none); without a "
                                        "group, subscribe([topic]) reads every partition of the topic and "
                                        "add_topic(topic, partition) reads one")
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
        """Stop consuming ``topic`` (subscribed by name), or the static ``partition`` of it.

        Without a group the partitions go at once; a static partition of a topic still
        read whole (subscribed) stays owned as part of it."""
        self._check_open()
        sub = self._subscription
        if partition is None:
            if topic in sub.topics:
                sub.topics.discard(topic)
                if self._group is not None:
                    self._group.request_rejoin(f"unsubscribed from topic {topic}")
                else:
                    release_unsubscribed(sub)
                    self._refresh.subscription_changed()
            return
        tp = TopicPartition(topic, partition)
        if tp not in sub.static:
            return
        sub.static.discard(tp)
        if self._group is not None:
            self._group.request_rejoin(f"released static partition {topic}-{partition}")
        elif not owns_topic(sub, topic):
            sub.remove_partition(tp)

    def subscribe(self, topics: Iterable[str] = (), *, pattern: str | re.Pattern[str] | None = None) -> None:
        """Replace the subscription with ``topics`` and/or the topics matching ``pattern``.

        The pattern must match a whole topic name (``re.fullmatch``); it is matched
        against the cluster's topics at the next poll() and every ``metadata.max.age.ms``,
        so a topic created later joins the subscription, and is read from its beginning.
        Static partitions are kept.

        With ``group.id`` the group coordinator assigns the partitions (a rebalance).
        Without one (kafka-python's ``group_id=None``) this consumer owns every partition
        of the subscribed topics, from ``auto.offset.reset``; topics (by name or pattern)
        and partitions that appear later are picked up at a metadata refresh (every
        ``metadata.max.age.ms``) and read from their beginning. Nothing can be committed.
        ``topics`` may be one topic name as a string (as kafka-python accepts).

        Raises:
            IllegalStateError: a manual assignment (assign()); the consumer is closed.
            InvalidTopic: an illegal topic name. re.error: a bad pattern.
        """
        self._check_open()
        self._check_not_manual("subscribe()")
        if isinstance(topics, str):
            topics = [topics]  # kafka-python's subscribe("t") too
        names = {validate_topic(t) for t in topics}
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        sub = self._subscription
        changed = names != sub.topics or compiled != sub.pattern
        if compiled != sub.pattern:
            sub.pattern_matched = False
        sub.topics = names
        sub.pattern = compiled
        if compiled is None:
            sub.matched = set()
        self._refresh.subscription_changed()
        if self._group is None:
            release_unsubscribed(sub)
        elif changed:
            self._group.request_rejoin("subscription replaced")

    def unsubscribe(self) -> None:
        """Consume nothing: drop topics, pattern, static partitions and a manual assignment (with a
        group: leave it at the next poll)."""
        self._check_open()
        sub = self._subscription
        sub.topics, sub.pattern, sub.matched, sub.pattern_matched = set(), None, set(), False
        sub.self_owned, sub.absent = {}, set()
        self._refresh.subscription_changed()
        sub.static.clear()
        for tp in sub.manual:
            sub.remove_partition(tp)
        sub.manual = set()
        if self._group is not None:
            self._group.request_rejoin("unsubscribed")
        else:
            for tp in list(sub.assignment):
                sub.remove_partition(tp)

    def assign(self, partitions: Iterable[PartitionLike]) -> None:
        """Read exactly these partitions, without group membership (kafka-python's ``assign``).

        ``partitions``: TopicPartition objects or ``(topic, partition)`` tuples; they
        replace the previous manual assignment (partitions kept keep their positions).
        An empty list is ``unsubscribe()``. A new partition starts, at the next poll(),
        from the group's committed offset when ``group.id`` is set and one is committed,
        else from ``auto.offset.reset``. The consumer never registers with the group:
        no heartbeats, no rebalances, nobody else is kept from the partitions. With
        ``group.id``, commit(), commit_async() and committed() work, as standalone
        commits (refused with NOT_OWNER while the group has live members), and so does
        auto-commit.

        Raises:
            IllegalStateError: the consumer has a subscription (add_topic(), subscribe()):
                call unsubscribe() first; or it is closed.
            InvalidTopic: an illegal topic name. ValueError: a negative partition.
        """
        self._check_open()
        wanted: set[TopicPartition] = set()
        for p in partitions:
            tp = to_tp(p)
            validate_topic(tp.topic)
            if tp.partition < 0:
                raise ValueError(f"partition must be >= 0, got {tp.partition}")
            wanted.add(tp)
        if not wanted:
            self.unsubscribe()
            return
        sub = self._subscription
        if sub.has_subscription() or sub.topics or sub.pattern is not None:
            raise IllegalStateError("assign() cannot be mixed with subscribe() or add_topic(): this consumer "
                                    "has a subscription; call unsubscribe() first")
        group = self._group
        if group is not None:
            group.end_membership(self._clock())  # after unsubscribe(), if the next poll() has not left yet
        for tp in set(sub.assignment) - wanted:
            sub.remove_partition(tp)
        reset = COMMITTED if group is not None else None
        for tp in sorted(wanted):
            sub.add_partition(tp, reset)
        sub.manual = wanted

    def subscription(self) -> set[str]:
        """The subscribed topics, explicit and pattern-matched (the pattern's matches as of the last match)."""
        return self._subscription.subscribed_topics()

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer owns now: the group's (empty while it joins or rebalances),
        without a group the static ones and every known partition of the subscribed topics, or the
        manual assignment."""
        return set(self._subscription.assignment)

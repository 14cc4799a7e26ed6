"""Kafka 0.7's consumer-side rebalance, as pure functions (seed 000 5.6, seed 004).

Every 0.7 consumer in a group computes its share on its own from what ZooKeeper
shows, so every member must compute it the same way, byte for byte:

- consumer id: ``<group>_<hostname>-<ms timestamp>-<8 hex>`` (or ``<group>_<consumerid>``
  when the consumerid setting is given, as 0.7 did); its THREAD ids are
  ``<consumer id>-<i>`` for ``i`` in ``range(streams)``, per topic;
- the ids node value, ``/consumers/[group]/ids/[consumer id]``: for a static
  subscription the JSON map topic -> streams written as 0.7 wrote it,
  ``{ "topic1": 2, "topic2": 1 }``; for a topic filter ``*<n>*<regex>`` (whitelist) or
  ``!<n>!<regex>`` (blacklist), ``n`` streams;
- per topic, the thread ids of every member subscribed to it, sorted as strings, and
  the topic's ``"brokerid-partition"`` names, sorted as strings (a replicated topic's
  partitions are named by id, ``"3"``, and sorted as numbers, as Kafka 0.8 does);
- the range rule: with ``n = len(parts) // len(threads)`` and
  ``extra = len(parts) % len(threads)``, the thread at position ``i`` gets
  ``parts[start:start + count]``, ``start = n * i + min(i, extra)``,
  ``count = n + (1 if i < extra else 0)`` (the extra partitions go to the earliest
  threads: 5-5-4-4, never 4-4-4-5).

A filter subscribes a member to every topic under ``/brokers/topics`` (and every
replicated topic, rill.client.zookeeper.replicated_view) whose name the regex matches
in full (Java's ``String.matches``); 0.7 also turns commas in a whitelist into ``|``
and drops spaces and surrounding quotes, so ``"a,b"`` means ``a|b``. Python's ``re``
stands in for Java's regex: the common syntax agrees.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from rill.client.topic_names import is_internal_topic

__all__ = [
    "Assignment", "FilterSubscription", "StaticSubscription", "Subscription", "consumer_id", "decode_subscription",
    "encode_subscription", "group_assignment", "partition_order", "range_share", "thread_id", "thread_ids",
]

WHITELIST_MARKER = "*"
BLACKLIST_MARKER = "!"
_FILTER_VALUE = re.compile(r"([*!])(\d+)\1(.*)", re.DOTALL)


def consumer_id(group: str, hostname: str, now_ms: int, suffix: str | None = None, given: str | None = None) -> str:
    """The consumer's id: ``<group>_<given>``, or ``<group>_<hostname>-<now_ms>-<8 hex>``."""
    if given:
        return f"{group}_{given}"
    return f"{group}_{hostname}-{now_ms}-{suffix or uuid.uuid4().hex[:8]}"


def thread_id(consumer: str, index: int) -> str:
    """The id of the consumer's stream ``index`` (0.7's consumer thread id)."""
    return f"{consumer}-{index}"


def thread_ids(consumer: str, streams: int) -> list[str]:
    return [thread_id(consumer, i) for i in range(streams)]


# -- subscriptions and the ids node value ------------------------------------------------------

@dataclass(frozen=True)
class StaticSubscription:
    """Named topics, each with its number of streams (0.7's StaticTopicCount)."""

    topics: Mapping[str, int] = field(default_factory=dict)

    def streams_by_topic(self, all_topics: Iterable[str]) -> dict[str, int]:
        """Topic -> streams; every named topic, whether or not a broker lists it yet."""
        return dict(self.topics)


@dataclass(frozen=True)
class FilterSubscription:
    """A whitelist or blacklist regex with a number of streams (0.7's WildcardTopicCount)."""

    regex: str
    streams: int
    blacklist: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(normalize_regex(self.regex))

    def allows(self, topic: str) -> bool:
        """Never an internal topic (``__rill...``), as Kafka's ``exclude.internal.topics``."""
        if is_internal_topic(topic):
            return False
        matched = self.pattern.fullmatch(topic) is not None
        return not matched if self.blacklist else matched

    def streams_by_topic(self, all_topics: Iterable[str]) -> dict[str, int]:
        """Topic -> streams for every topic of ``all_topics`` the filter allows."""
        return {t: self.streams for t in sorted(all_topics) if self.allows(t)}


Subscription = StaticSubscription | FilterSubscription


def normalize_regex(raw: str) -> str:
    """0.7's TopicFilter clean-up: trim, ``,`` -> ``|``, no spaces, no surrounding quotes."""
    text = raw.strip().replace(",", "|").replace(" ", "")
    return re.sub(r"""["']+$""", "", re.sub(r"""^["']+""", "", text))


def encode_subscription(subscription: Subscription) -> bytes:
    """The ids node value, exactly as a 0.7 consumer writes it."""
    if isinstance(subscription, FilterSubscription):
        marker = BLACKLIST_MARKER if subscription.blacklist else WHITELIST_MARKER
        return f"{marker}{subscription.streams}{marker}{subscription.regex}".encode()
    body = ", ".join(f"{json.dumps(topic)}: {streams}" for topic, streams in subscription.topics.items())
    return ("{ " + body + " }").encode()


def decode_subscription(value: bytes) -> Subscription:
    """Parse an ids node value written by rill or by any 0.7 consumer.

    Raises:
        ValueError: neither a filter value nor a JSON object of topic -> positive int.
    """
    text = value.decode("utf-8")
    m = _FILTER_VALUE.fullmatch(text)
    if m is not None:
        return FilterSubscription(m.group(3), int(m.group(2)), blacklist=m.group(1) == BLACKLIST_MARKER)
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"consumer registration {text[:80]!r} is neither JSON nor a topic filter") from exc
    if not isinstance(parsed, dict):
        raise ValueError(f"consumer registration {text[:80]!r} is not a JSON object")
    topics: dict[str, int] = {}
    for topic, streams in parsed.items():
        if isinstance(streams, str) and streams.isdigit():  # some 0.7 ports wrote the count as a string
            streams = int(streams)
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ValueError(f"consumer registration {text[:80]!r}: bad stream count for {topic!r}")
        topics[str(topic)] = streams
    return StaticSubscription(topics)


# -- the range rule ------------------------------------------------------------------------------

def range_share(parts: list[str], threads: list[str], thread: str) -> list[str]:
    """The slice of ``parts`` (already sorted) owned by ``thread`` among ``threads`` (sorted).

    Returns [] when there are more threads than partitions and this one gets none.

    Raises:
        ValueError: ``thread`` is not in ``threads``.
    """
    position = threads.index(thread)
    per_thread, extra = divmod(len(parts), len(threads))
    start = per_thread * position + min(position, extra)
    count = per_thread + (1 if position < extra else 0)
    return parts[start:start + count]


def partition_order(name: str) -> tuple[int, str]:
    """Sort key of partition names: ids (``"10"``) as numbers, then 0.7 names (``"1-10"``) as strings."""
    return (int(name), "") if name.isdigit() else (-1, name)


class Assignment(NamedTuple):
    """One member's view of one rebalance.

    ``owned`` maps ``(topic, "broker-partition")`` to this member's thread id that owns
    it; ``inputs`` is everything the decision was computed from (per topic the sorted
    thread ids and the sorted partitions), so an equal ``inputs`` means an equal result.
    """

    owned: dict[tuple[str, str], str]
    inputs: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]


def group_assignment(me: str, members: Mapping[str, Subscription], topic_partitions: Mapping[str, list[str]]
                     ) -> Assignment:
    """The partitions member ``me`` owns, given every member's subscription.

    ``members`` maps consumer id -> subscription and must include ``me``;
    ``topic_partitions`` maps every topic under ``/brokers/topics`` (and every replicated
    topic) to its partition names (any order: they are sorted here, :func:`partition_order`).
    A filter member subscribes to the topics of ``topic_partitions`` it allows; a static
    member to its named topics.
    """
    all_topics = list(topic_partitions)
    per_topic: dict[str, list[str]] = {}
    for member, subscription in members.items():
        for topic, streams in subscription.streams_by_topic(all_topics).items():
            per_topic.setdefault(topic, []).extend(thread_ids(member, streams))
    mine = members[me].streams_by_topic(all_topics)
    owned: dict[tuple[str, str], str] = {}
    inputs: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for topic in sorted(mine):
        threads = sorted(per_topic[topic])
        parts = sorted(topic_partitions.get(topic, []), key=partition_order)
        inputs[topic] = (tuple(threads), tuple(parts))
        if not parts:
            continue
        for thread in thread_ids(me, mine[topic]):
            for part in range_share(parts, threads, thread):
                owned[(topic, part)] = thread
    return Assignment(owned, inputs)

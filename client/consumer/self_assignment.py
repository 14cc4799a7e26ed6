"""Without ``group.id``, a subscription is read whole: every partition of every subscribed topic.

This is kafka-python's ``group_id=None``: ``subscribe(topics)`` or ``subscribe(pattern=...)``
(and topics given to the constructor) make the consumer own every partition of the
subscribed topics itself, with no coordinator and no commits. The metadata refresh
(:mod:`~rill.client.consumer.metadata_refresh`) calls :func:`own_subscribed` after each
refresh, which happens at the next poll() after the subscription changed and then every
``metadata.max.age.ms``. Where each partition starts:

- a partition of a topic that exists when it is first looked for (the first refresh
  after it was subscribed, or the pattern's first match): ``auto.offset.reset``;
- every partition of a topic that appears later (subscribed by name before it
  existed, or a new topic matching the pattern): its beginning, whatever
  ``auto.offset.reset`` says (seed 003: "For newly added partitions and topics, the
  offset is set to smallest", as the coordinator does for a group);
- a partition added to a topic already read: its beginning, for the same reason.

Static partitions (``add_topic(topic, partition)``) are owned besides, and stay when
their topic leaves the subscription. A topic that leaves the cluster keeps its
partitions (the fetcher reports their errors) until it leaves the subscription.

Not thread-safe: driven by the consumer's poll loop and its calls.
"""

from __future__ import annotations

from rill.client.cluster_metadata import ClusterMetadata
from rill.client.consumer.subscription import EARLIEST, SubscriptionState, TopicPartition


def own_subscribed(sub: SubscriptionState, metadata: ClusterMetadata, *, pattern_matched_before: bool) -> \
        list[TopicPartition]:
    """Own every partition ``metadata`` lists of the subscribed topics; drop the topics no longer subscribed.

    ``pattern_matched_before``: the pattern had been matched before this refresh, so a topic
    it matches now that was not owned yet is new in the cluster (it starts at its beginning).

    Returns:
        The partitions added (empty when nothing changed).
    """
    release_unsubscribed(sub)
    added: list[TopicPartition] = []
    for topic in sorted(sub.subscribed_topics()):
        count = metadata.partitions(topic)
        owned = sub.self_owned.get(topic)
        if count is None:
            if owned is None:
                sub.absent.add(topic)
            continue
        if owned is None:
            appeared = topic in sub.absent or (topic not in sub.topics and pattern_matched_before)
            reset, first = (EARLIEST if appeared else sub.default_reset), 0
        else:
            reset, first = EARLIEST, owned
        for partition in range(first, count):
            tp = TopicPartition(topic, partition)
            if tp not in sub.assignment:
                sub.add_partition(tp, reset)
                added.append(tp)
        sub.self_owned[topic] = max(count, owned or 0)
        sub.absent.discard(topic)
    return added


def release_unsubscribed(sub: SubscriptionState) -> list[TopicPartition]:
    """Stop reading the topics that left the subscription (their static partitions stay); returns what went."""
    wanted = sub.subscribed_topics()
    sub.absent &= wanted
    removed: list[TopicPartition] = []
    for topic in [t for t in sub.self_owned if t not in wanted]:
        del sub.self_owned[topic]
        for tp in sorted(tp for tp in sub.assignment if tp.topic == topic and tp not in sub.static):
            sub.remove_partition(tp)
            removed.append(tp)
    return removed


def owns_topic(sub: SubscriptionState, topic: str) -> bool:
    """Is ``topic`` read whole (without a group), so that its static partitions are owned anyway?"""
    return topic in sub.self_owned

"""When the consumer's poll loop refreshes cluster metadata, and the pattern subscription it feeds.

Metadata (brokers, partition leaders) is refreshed from inside poll() when it is
needed: an owned partition has no known leader, or the fetcher lost a connection or
was told a topic is unknown (``Fetcher.needs_metadata``). A failed refresh is logged
(``consumer.metadata_failed``) and retried after ``retry.backoff.ms``; so is the next
one after a success (at most one refresh per backoff).

The subscription is also **matched** against the metadata: at the next poll after it
changed, then every ``metadata.max.age.ms``. With a pattern (``subscribe(pattern=...)``)
that refresh covers the whole cluster and the pattern is matched against its topics;
with a group, a changed matched set makes the group client rejoin (a rebalance) with
the new subscription. Without a group, any subscription (topics or pattern) is matched,
and after every refresh the consumer owns each partition of the subscribed topics
(:mod:`~rill.client.consumer.self_assignment`: new topics and partitions are picked up
this way).

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import math

import structlog

from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.group_client import GroupClient
from rill.client.consumer.self_assignment import own_subscribed
from rill.client.consumer.subscription import SubscriptionState
from rill.client.errors import RillError
from rill.client.cluster_metadata import ClusterMetadata

log = structlog.get_logger(__name__)


class MetadataRefresh:
    """Metadata refresh deadlines of one consumer; see the module docstring.

    ``match_at``: when the subscription is next matched (inf: nothing to match). ``retry_at``:
    no refresh before this time (the backoff after the last one). ``_needed``: needed()
    as maybe_refresh() found it, for next_deadline() in the same loop turn (None: the
    metadata changed since, so it is computed again).
    """

    def __init__(self, metadata: ClusterMetadata, subscription: SubscriptionState, fetcher: Fetcher,
                 group: GroupClient | None, *, max_age: float, retry_backoff: float) -> None:
        self.metadata = metadata
        self.subscription = subscription
        self.fetcher = fetcher
        self.group = group
        self.max_age = max_age
        self.retry_backoff = retry_backoff
        self.retry_at = 0.0
        self.match_at = math.inf
        self._needed: bool | None = None

    def subscription_changed(self) -> None:
        """The subscription changed: match it at the next poll (when there is something to match)."""
        self.match_at = 0.0 if self._matching() else math.inf

    def _matching(self) -> bool:
        """Is the subscription matched against the metadata: a pattern, or any subscription without a group?"""
        sub = self.subscription
        return sub.pattern is not None or (self.group is None and bool(sub.topics))

    def needed(self) -> bool:
        """Is a refresh needed now (besides the pattern's schedule)?"""
        if self.fetcher.needs_metadata:
            return True
        return any(self.metadata.leader(tp.topic, tp.partition) is None for tp in self.subscription.assignment)

    def next_deadline(self, now: float) -> float:
        """When the loop must next wake to refresh (inf: not scheduled).

        Called after maybe_refresh() in the same loop turn: reuses what it found (no
        second walk of the assignment) unless a refresh changed the metadata.
        """
        needed = self._needed
        if self.fetcher.needs_metadata or (needed if needed is not None else self.needed()):
            return min(self.match_at, max(now, self.retry_at))
        return self.match_at

    def maybe_refresh(self, now: float) -> None:
        """Refresh when needed or when the match is due, unless within the backoff; failures are logged."""
        match_due = now >= self.match_at
        needed = self._needed = self.needed()
        if not (match_due or needed) or now < self.retry_at:
            return
        sub = self.subscription
        group = self.group
        whole_cluster = match_due and sub.pattern is not None
        topics = () if whole_cluster else {tp.topic for tp in sub.assignment} | sub.subscribed_topics()
        try:
            self.metadata.refresh(topics)
        except RillError as exc:
            log.warning("consumer.metadata_failed", reason=str(exc), group=group.group if group is not None else None)
            self.retry_at = now + self.retry_backoff
            return
        self.fetcher.needs_metadata = False
        self._needed = None
        self.retry_at = now + self.retry_backoff
        pattern_matched_before = sub.pattern_matched
        if match_due:
            self.match_at = now + self.max_age if self._matching() else math.inf
            if whole_cluster and sub.set_matched(self.metadata.topics) and group is not None:
                log.info("consumer.pattern_matched", group=group.group, topics=sorted(sub.matched))
                group.request_rejoin("the pattern matches other topics")
        if group is None and (sub.topics or sub.pattern is not None or sub.self_owned):
            added = own_subscribed(sub, self.metadata, pattern_matched_before=pattern_matched_before)
            if added:
                log.info("consumer.partitions_added", partitions=[f"{t}-{p}" for t, p in added])

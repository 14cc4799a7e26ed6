"""When the consumer's poll loop refreshes cluster metadata, and the pattern subscription it feeds.

Metadata (brokers, partition leaders) is refreshed from inside poll() when it is
needed: an owned partition has no known leader, or the fetcher lost a connection or
was told a topic is unknown (``Fetcher.needs_metadata``). A failed refresh is logged
(``consumer.metadata_failed``) and retried after ``retry.backoff.ms``; so is the next
one after a success (at most one refresh per backoff).

With ``subscribe(pattern=...)`` the refresh also happens every
``metadata.max.age.ms``, covering the whole cluster, and the pattern is matched
against its topics; when the matched set changes, the group client rejoins (a
rebalance) with the new subscription.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import math

import structlog

from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.group_client import GroupClient
from rill.client.consumer.subscription import SubscriptionState
from rill.client.errors import RillError
from rill.client.cluster_metadata import ClusterMetadata

log = structlog.get_logger(__name__)


class MetadataRefresh:
    """Metadata refresh deadlines of one consumer; see the module docstring.

    ``pattern_at``: when the pattern is next matched (inf: no pattern). ``retry_at``:
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
        self.pattern_at = math.inf
        self._needed: bool | None = None

    def match_pattern_soon(self) -> None:
        """A pattern was subscribed: match it at the next poll."""
        self.pattern_at = 0.0

    def stop_matching(self) -> None:
        """No pattern any more."""
        self.pattern_at = math.inf

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
            return min(self.pattern_at, max(now, self.retry_at))
        return self.pattern_at

    def maybe_refresh(self, now: float) -> None:
        """Refresh when needed or when the pattern is due, unless within the backoff; failures are logged."""
        pattern_due = now >= self.pattern_at
        needed = self._needed = self.needed()
        if not (pattern_due or needed) or now < self.retry_at:
            return
        sub = self.subscription
        group = self.group
        topics = () if pattern_due else {tp.topic for tp in sub.assignment} | sub.subscribed_topics()
        try:
            self.metadata.refresh(topics)
        except RillError as exc:
            log.warning("consumer.metadata_failed", reason=str(exc), group=group.group if group is not None else None)
            self.retry_at = now + self.retry_backoff
            return
        self.fetcher.needs_metadata = False
        self._needed = None
        self.retry_at = now + self.retry_backoff
        if pattern_due:
            self.pattern_at = now + self.max_age
            if sub.set_matched(self.metadata.topics) and group is not None:
                log.info("consumer.pattern_matched", group=group.group, topics=sorted(sub.matched))
                group.request_rejoin("the pattern matches other topics")

"""Consumer groups coordinated by this broker, read at each scrape: members, generation, state,
rebalances, and per partition the committed offset and the lag in bytes and in seconds.

Lag is what ``rill groups describe`` shows, computed the same way: in bytes, the log end
minus the committed offset (or the log start when nothing is committed); in seconds,
how long ago the message at the committed offset was appended (0 when the group is at
the end). A partition on this broker is read here; one on another broker is asked of it,
one connection per broker and group per scrape, so a group's lag costs a round trip per
broker, not per partition. A partition whose broker does not answer has no lag
series in that scrape (``rill_group_lag_unknown_partitions`` counts them).

Each broker reports the groups it coordinates, so summing over brokers counts each group
once. Label values are group, topic and partition names: bounded by the groups and
partitions that exist, never by members.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rill.broker.cluster.log_catalog import LogCatalog
from rill.broker.metrics.exposition import RowFamily
from rill.coordinator.describe import GroupDescription, group_partitions
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.state import GroupState

__all__ = ["GroupCollector"]

_STATES = [state.value for state in GroupState]


class GroupCollector(Collector):
    """Collects the metrics of the groups ``coordinator`` holds; ``catalog`` locates their partitions."""

    def __init__(self, coordinator: GroupCoordinator, catalog: LogCatalog) -> None:
        self.coordinator = coordinator
        self.catalog = catalog

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        members = GaugeMetricFamily("rill_group_members", "Live members of a group", labels=["group"])
        generation = GaugeMetricFamily("rill_group_generation", "A group's current generation", labels=["group"])
        state = GaugeMetricFamily("rill_group_state", "1 for a group's current state, 0 for the others",
                                  labels=["group", "state"])
        rebalances = CounterMetricFamily("rill_group_rebalances", "Rebalances a group completed while coordinated "
                                         "by this broker", labels=["group"])
        described: list[GroupDescription] = []
        for name in self.coordinator.group_names():
            group = self.coordinator.describe(name)
            if group is None:  # deleted since listed
                continue
            described.append(group)
            members.add_metric([name], len(group.members))
            generation.add_metric([name], group.generation)
            for value in _STATES:
                state.add_metric([name, value], 1 if group.state == value else 0)
            rebalances.add_metric([name], self.coordinator.rebalances.get(name, 0))
        yield from (members, generation, state, rebalances)
        yield from self._lag(described)

    def _lag(self, groups: list[GroupDescription]) -> Iterator[Metric]:
        labels = ["group", "topic", "partition"]
        committed = RowFamily("rill_group_committed_offset_bytes", "A group's committed offset (a byte position; "
                              "-1: none committed)", labels)
        lag_bytes = RowFamily("rill_group_lag_bytes", "Bytes between a group's committed offset and the log end",
                              labels)
        lag_seconds = RowFamily("rill_group_lag_seconds", "How long ago the message at a group's committed offset "
                                "was appended (0 at the log end)", labels)
        counts = self.catalog.topics()
        unknown = 0
        now = time.time()
        for group in groups:
            name = group.group
            rows = [(tp.topic, tp.partition, group.offsets.get(tp, -1)) for tp in group_partitions(group, counts)]
            time.sleep(0)  # the GIL to the event loop between groups (exposition.py)
            points = self.catalog.lag_points({(t, p): offset for t, p, offset in rows})
            for topic, partition, offset in rows:
                key = (name, topic, str(partition))
                committed.add(key, offset)
                point = points.get((topic, partition))
                if point is None:
                    unknown += 1
                    continue
                position, end, appended = point
                lag_bytes.add(key, max(0, end - position))
                lag_seconds.add(key, max(0.0, now - appended / 1000) if appended is not None else 0.0)
        yield from (committed, lag_bytes, lag_seconds)
        yield GaugeMetricFamily("rill_group_lag_unknown_partitions", "Group partitions whose lag this scrape could "
                                "not read (their broker did not answer)", value=unknown)

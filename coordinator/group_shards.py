"""Where each group's records are stored: one local log, or a partition of the groups topic.

The coordinator's state changes only through records persisted before they are applied
(rill.coordinator.service.RecordSink). A :class:`Shard` is one offset store and the groups
whose records it holds; :class:`Shards` names the shard of a group:

- a single broker has one shard, its local log ``<log.dir>/.coordinator/offsets-0``
  (:class:`SingleShard`), durable by fsync;
- in a cluster, partition ``p`` of the internal topic ``__rill_groups`` is a shard while
  this broker leads it and has loaded it (rill.broker.cluster.group_log_placement), durable
  once the partition's in-sync replicas have it. A group whose partition is not loaded
  here raises :class:`NotCoordinator`.

Both are the same mechanism (an offset store over a log, compacted by snapshots of the
groups it holds); only the log and its :class:`~rill.coordinator.fsync_commit.Commit` differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rill.coordinator.offsets_log import OffsetStore

__all__ = ["NotCoordinator", "Shard", "Shards", "SingleShard"]


class NotCoordinator(Exception):
    """This broker does not coordinate the group (now): its partition is led or loaded elsewhere."""


@dataclass(frozen=True, eq=False)
class Shard:
    """One offset store and the groups whose records it holds (``holds(name)``)."""

    store: OffsetStore
    holds: Callable[[str], bool]


class Shards(Protocol):
    def shard_for(self, group: str) -> Shard:
        """The shard that stores ``group``'s records.

        Raises:
            NotCoordinator: the group's shard is not served by this broker now.
        """
        ...


class SingleShard:
    """Every group in one store (a single broker's local log)."""

    def __init__(self, store: OffsetStore) -> None:
        self.shard = Shard(store, lambda _name: True)

    def shard_for(self, group: str) -> Shard:
        return self.shard

"""One replicated partition held by this broker: its log, its leader epochs and its role.

The controller says who leads each partition in which epoch (:class:`PartitionRole`,
what Kafka's LeaderAndIsr carries per partition); the replica manager applies it to the
:class:`Replica` this broker holds: as leader it keeps a
:class:`~rill.broker.replication.leader_state.LeaderState` (followers, ISR, high
watermark), as follower a replica fetcher copies the leader's bytes into its log.

Thread-safety: a follower's log is appended and truncated by its replica fetcher's
thread, a leader's by the broker's event loop; ``lock`` is held by whichever does it,
and by a role change, so a change of role never meets an append halfway. Plain
attributes (role, epochs, high watermark) are written under ``lock`` and may be read
without it (each is one assignment).
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from rill.broker.log.leader_epochs import LeaderEpochCache
from rill.broker.log.log import Log
from rill.broker.log.topic_log_settings import with_topic_settings
from rill.broker.replication.leader_state import LeaderState

if TYPE_CHECKING:
    from rill.broker.replication.heal_cut import PendingCut

__all__ = ["PartitionRole", "Replica", "Role"]

_logger = structlog.get_logger(__name__)


class Role(enum.Enum):
    NONE = 0  # held, but no role given yet (start-up, or the partition went offline)
    LEADER = 1
    FOLLOWER = 2


@dataclass(frozen=True, slots=True)
class PartitionRole:
    """A partition's leadership as the controller decided it (one entry of a LeaderAndIsr)."""

    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int  # of the partition's state node, for the leader's conditional ISR writes
    min_insync: int = 0  # the topic's min.insync.replicas (0: the broker's setting)
    adding: tuple[int, ...] = ()  # while reassigned: the replicas joining (they fetch throttled until caught up)
    removing: tuple[int, ...] = ()  # and those leaving
    log_settings: tuple[tuple[str, str], ...] = ()  # the topic's retention.ms, retention.bytes, segment.bytes


class Replica:
    """This broker's copy of one replicated partition."""

    def __init__(self, log: Log, broker_id: int) -> None:
        if log.leader_epochs is None:
            raise ValueError(f"{log.topic}-{log.partition} is not a replica (it has no leader-epoch cache)")
        self.log = log
        self.epochs: LeaderEpochCache = log.leader_epochs
        self.broker_id = broker_id
        self.lock = threading.Lock()
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.min_insync = 0  # the topic's min.insync.replicas (0: the broker's setting)
        self.default_config = log.config  # the broker's settings for this log, under the topic's own
        self.leader_state: LeaderState | None = None  # while leading
        self.follower_high_watermark = 0  # while following: min(leader's HW, own log end)
        self.throttled = False  # a follower added by a reassignment and not in the ISR: its fetches are throttled
        self.pending_cut: PendingCut | None = None  # a corrupt range to cut before the next fetch (heal_cut.py)

    @property
    def topic(self) -> str:
        return self.log.topic

    def apply_log_settings(self, settings: tuple[tuple[str, str], ...]) -> None:
        """The topic's own log settings over the broker's (topic_log_settings), applied to this log now."""
        config = with_topic_settings(self.default_config, settings)
        if config != self.log.config:
            _logger.info("replica.log_config_changed", topic=self.topic, partition=self.partition,
                         settings=dict(settings), segment_bytes=config.segment_bytes,
                         retention_ms=config.retention_ms, retention_bytes=config.retention_bytes)
            self.log.config = config

    @property
    def partition(self) -> int:
        return self.log.partition

    @property
    def high_watermark(self) -> int:
        """The end of committed data: consumers read below it, ``acks=all`` waits for it."""
        state = self.leader_state
        if state is not None:
            return state.high_watermark
        return min(self.follower_high_watermark, self.log.end_offset)

    def __repr__(self) -> str:
        return (f"<Replica {self.topic}-{self.partition} {self.role.name.lower()} leader={self.leader_id} "
                f"epoch={self.leader_epoch} hw={self.high_watermark} end={self.log.end_offset}>")

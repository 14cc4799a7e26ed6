"""What a partition's leader knows of its followers: their log ends, the ISR, the high watermark.

Kafka's ``Partition`` (leader side) as rill needs it, with no I/O: the replica manager
feeds it follower fetches and the clock, and it answers which ISR change to propose
and where the high watermark is. Offsets are byte positions, so a follower's fetch
offset *is* its log end (LEO): followers assign nothing.

Rules (Kafka 2.4's, ../shared/notes/replication.md section 1):

- **Caught up.** A fetch at or past the leader's LEO makes the follower caught up at
  that fetch's time; a fetch at or past the leader's LEO *at the previous fetch* makes
  it caught up at the previous fetch's time (a follower one fetch behind a busy leader
  still counts).
- **Shrink.** A follower in the ISR whose LEO differs from the leader's and that has not
  been caught up for ``lag_max_ms`` (``replica.lag.time.max.ms``) leaves the ISR.
- **Expand.** A follower outside the ISR joins once its LEO is at or past the high
  watermark *and* past the offset where the current leader epoch began; otherwise it
  could be elected without committed data between the leader's HW and LEO.
- **High watermark.** The smallest LEO among the leader and the ISR followers; it never
  goes down on a leader. A follower whose LEO is not known yet (no fetch in this epoch)
  holds it where it is. While an expansion is being written, the joining follower counts
  already (Kafka's "maximal ISR", KIP-497): once written, ZooKeeper lists it in sync and
  the controller may elect it, so nothing it lacks may have been committed meanwhile.
- **ISR changes are proposals.** :meth:`shrink_proposal` and the expansion returned by
  :meth:`on_follower_fetch` name a new ISR; it takes effect only through
  :meth:`apply_isr`, after the caller's conditional write to ZooKeeper succeeded (the
  zkVersion fences a leader that has been replaced: it cannot shrink the ISR to
  itself, so its HW cannot pass the followers that left it, so it acknowledges nothing).

Thread-safety: none; one thread (the broker's event loop) owns a LeaderState.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FollowerProgress", "LeaderState", "UNKNOWN_OFFSET"]

UNKNOWN_OFFSET = -1


class FollowerProgress:
    """One follower as its leader sees it."""

    __slots__ = ("broker_id", "log_end", "last_fetch_ms", "last_caught_up_ms", "leader_end_at_last_fetch")

    def __init__(self, broker_id: int, last_caught_up_ms: float) -> None:
        self.broker_id = broker_id
        self.log_end = UNKNOWN_OFFSET  # unknown until its first fetch in this leader epoch
        self.last_fetch_ms = 0.0
        self.last_caught_up_ms = last_caught_up_ms
        self.leader_end_at_last_fetch = UNKNOWN_OFFSET

    def update(self, fetch_offset: int, now_ms: float, leader_end: int) -> None:
        """Record a fetch at ``fetch_offset`` made at ``now_ms`` while the leader's LEO was ``leader_end``."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.leader_end_at_last_fetch != UNKNOWN_OFFSET and fetch_offset >= self.leader_end_at_last_fetch:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end = fetch_offset
        self.leader_end_at_last_fetch = leader_end
        self.last_fetch_ms = now_ms

    def __repr__(self) -> str:
        return (f"<FollowerProgress {self.broker_id} log_end={self.log_end} "
                f"last_caught_up_ms={self.last_caught_up_ms:.0f}>")


class LeaderState:
    """The leader's view of one partition in one leader epoch.

    ``isr`` includes the leader; ``replicas`` is the assignment (the leader among them);
    ``high_watermark`` starts where this broker's own HW was (as a follower, or after a
    restart) and ``epoch_start_offset`` is the leader's LEO when the epoch began.
    """

    def __init__(self, leader_id: int, leader_epoch: int, replicas: Iterable[int], isr: Iterable[int],
                 zk_version: int, *, high_watermark: int, epoch_start_offset: int, now_ms: float) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr) | {leader_id}
        self.zk_version = zk_version
        self.high_watermark = min(high_watermark, epoch_start_offset)
        self.epoch_start_offset = epoch_start_offset
        # ISR members start caught up now (Kafka's makeLeader); the others never were
        self.followers = {b: FollowerProgress(b, now_ms if b in self.isr else 0.0)
                          for b in self.replicas if b != leader_id}
        self.pending_isr: frozenset[int] | None = None  # proposed, its ZooKeeper write in flight

    # -- follower fetches -------------------------------------------------------------------

    def on_follower_fetch(self, follower_id: int, fetch_offset: int, now_ms: float,
                          leader_end: int) -> frozenset[int] | None:
        """Record a follower's fetch; returns a new ISR to propose when it may join, else None.

        Raises:
            KeyError: ``follower_id`` is not a replica of this partition.
        """
        progress = self.followers[follower_id]
        progress.update(fetch_offset, now_ms, leader_end)
        self.update_high_watermark(leader_end)
        if (follower_id not in self.isr and self.pending_isr is None
                and fetch_offset >= self.high_watermark and fetch_offset >= self.epoch_start_offset):
            return self.isr | {follower_id}
        return None

    # -- ISR ---------------------------------------------------------------------------------

    def out_of_sync(self, now_ms: float, leader_end: int, lag_max_ms: float) -> list[int]:
        """The ISR followers that have fallen behind for longer than ``lag_max_ms``."""
        return sorted(b for b in self.isr if b != self.leader_id
                      and self.followers[b].log_end != leader_end
                      and now_ms - self.followers[b].last_caught_up_ms > lag_max_ms)

    def shrink_proposal(self, now_ms: float, leader_end: int, lag_max_ms: float) -> frozenset[int] | None:
        """A new ISR without the out-of-sync followers, or None when all keep up (or a change is in flight)."""
        if self.pending_isr is not None:
            return None
        behind = self.out_of_sync(now_ms, leader_end, lag_max_ms)
        return self.isr - set(behind) if behind else None

    def apply_isr(self, isr: Iterable[int], zk_version: int, leader_end: int) -> None:
        """The ISR write succeeded (or the controller sent a newer one): use it."""
        self.isr = frozenset(isr) | {self.leader_id}
        self.zk_version = zk_version
        self.pending_isr = None
        self.update_high_watermark(leader_end)

    # -- high watermark -------------------------------------------------------------------

    def maximal_isr(self) -> frozenset[int]:
        """The ISR, with the followers a proposal in flight would add (a shrink in flight removes no one yet)."""
        return self.isr if self.pending_isr is None else self.isr | self.pending_isr

    def update_high_watermark(self, leader_end: int) -> bool:
        """Recompute the HW from the maximal ISR's log ends; True when it moved (it only grows)."""
        candidate = leader_end
        for b in self.maximal_isr():
            if b == self.leader_id:
                continue
            end = self.followers[b].log_end if b in self.followers else UNKNOWN_OFFSET
            if end == UNKNOWN_OFFSET:
                return False  # an ISR member not heard from in this epoch holds the HW
            candidate = min(candidate, end)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def in_sync_count(self) -> int:
        return len(self.isr)

    def __repr__(self) -> str:
        return (f"<LeaderState leader={self.leader_id} epoch={self.leader_epoch} isr={sorted(self.isr)} "
                f"hw={self.high_watermark}>")

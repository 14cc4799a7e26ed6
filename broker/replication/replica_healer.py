"""Healing corrupt data from a healthy in-sync replica (issue 14).

A read or the scrubber that finds a corrupt range in a log records it (reads refuse it
from then on) and tells the log manager's ``on_corruption`` listeners
(broker/log/integrity.py). For a replica of a replicated partition the good bytes are on
the other in-sync replicas, and this broker copies them back the way a follower copies
anything: it cuts its log back to the first corrupt byte and its replica fetcher fetches
the rest again from the leader (every message CRC-checked on append). In order:

1. **Hand the cut to the replica** (``replica.pending_cut``, heal_cut.py): its fetcher
   thread makes it, under ``replica.lock``, before it builds its next request, so no fetch
   leaves with the damaged log end (the leader would count the replica as holding
   everything, and add it back to the ISR just before the cut). The cut waits for a
   leader epoch above the current one until step 3 says otherwise.
2. **Leave the ISR** (``IsrExit``: the controller's LeaveIsr, controller_isr_exits.py),
   retried ``attempts`` times. A cut goes below the high watermark, so the replica must
   not count as in sync while it refetches: an election would otherwise pick a copy
   without committed data. Where this broker leads, the controller first elects another
   in-sync replica (a leader never cuts committed data). If it is the ISR's only member
   (factor 1, or every other replica is behind) nothing can be healed: the cut is taken
   back, the range stays refused, ``replica.unhealable`` says so, and the operator's
   tools apply (docs/operations.md, "Corrupt data on disk").
3. **Wait to be a follower** (the controller sends its LeaderAndIsr before it answers, so
   this is at once unless that send was lost: then its resend, within ``role_wait_s``),
   and make the cut due in the epoch the replica is in.
4. **The cut** (fetcher thread): ``Log.truncate_to`` the range's first byte (a message
   boundary: the message before it passed its checks) and the leader-epoch cache from
   there, as fetch_block.py cuts on divergence; the cut bytes go to a side file
   (truncation.py). The fetch then starts at the new end.
5. **Watch** (this thread, every ``check_interval_s``): once the log end is past the range
   again, ``replica.healed``. The leader adds the replica back to the ISR when it has
   caught up (the usual rule).

A range already gone (cut by an earlier heal or a truncation) is skipped. A partition that
is not replicated (a Kafka 0.7-style topic) is left alone: reads refuse the range as before.
Without an ``IsrExit`` (no ZooKeeper: tests) only a follower heals, at once.

Log events: ``replica.healing`` (found, what happens next), ``replica.heal_truncated``
(cut, by the fetcher thread), ``replica.healed``, ``replica.unhealable``,
``replica.heal_failed`` (the controller could not be reached after ``attempts`` tries, the
role did not change, the replica was elected leader again before its cut, the cut
failed: the range stays refused), ``replica.heal_stalled`` (not refetched within
``heal_timeout_s``: no leader to fetch from, or the leader's log ends before the range
did), ``replica.heal_leave_isr_failed`` (one failed LeaveIsr attempt).

Thread-safety: :meth:`ReplicaHealer.corruption_found` is called on the thread that found
the range (the event loop, the scrubber) and only queues it; everything else but the cut
runs on one daemon thread, ``rill-replica-healer``, started with the first range, which
reads and sets a replica's pending cut under ``replica.lock``. :meth:`close` may be called
from any thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from rill.broker.log.integrity import CorruptRange
from rill.broker.log.log import Log
from rill.broker.replication.heal_cut import PendingCut, still_corrupt
from rill.broker.replication.replica import Replica, Role

__all__ = ["IsrExit", "IsrExitFailed", "ReplicaHealer"]

_logger = structlog.get_logger(__name__)
Key = tuple[str, int]


class IsrExitFailed(Exception):
    """The controller could not take this broker out of an ISR now (not found, unreachable, refused)."""


class IsrExit(Protocol):
    """The way out of ISRs (rill.broker.cluster.isr_exit_client.ZkIsrExit)."""

    def leave_isr(self, partitions: Sequence[Key]) -> set[Key]:
        """Leave the ISRs of ``partitions`` (another replica leads where this broker led); returns those whose
        ISR still lists this broker (no other in-sync replica). Raises IsrExitFailed."""
        ...

    def close(self) -> None:
        """Release its connections (called by :meth:`ReplicaHealer.close`)."""
        ...


@dataclass(slots=True)
class _Watch:
    """A healing replica: its cut pending or made, healed once its log end reaches ``target`` (the range's end)."""

    replica: Replica
    cut: PendingCut
    target: int
    started: float
    logger: Any


_STOP = object()


class ReplicaHealer:
    """Heals corrupt ranges of replicas from their in-sync peers (module docstring).

    ``replicas`` finds the replica held of a partition (None: not replicated here);
    ``isr_exit`` may be set after construction (once ZooKeeper is up).
    """

    def __init__(self, replicas: Callable[[Key], Replica | None], isr_exit: IsrExit | None = None, *,
                 attempts: int = 5, backoff_s: float = 1.0, role_wait_s: float = 10.0,
                 check_interval_s: float = 0.1, heal_timeout_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._replicas = replicas
        self.isr_exit = isr_exit
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.role_wait_s = role_wait_s
        self.check_interval_s = check_interval_s
        self.heal_timeout_s = heal_timeout_s
        self._clock = clock
        self._queue: queue.Queue[object] = queue.Queue()
        self._watches: list[_Watch] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.healed = 0
        """Ranges healed so far (read by tests)."""

    # -- any thread ---------------------------------------------------------------------------

    def corruption_found(self, log: Log, corrupt: CorruptRange) -> None:
        """A ``LogManager.on_corruption`` listener: queue a replica's range (never blocks, never raises)."""
        if self._replicas((log.topic, log.partition)) is None:
            return  # not a replica (a 0.7-style topic): reads refuse the range, as always
        with self._lock:
            if self._stop.is_set():
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rill-replica-healer", daemon=True)
                self._thread.start()
            self._queue.put((log, corrupt))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop healing (a heal in progress stops at its next wait). Idempotent."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        self._queue.put(_STOP)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        if self.isr_exit is not None:
            self.isr_exit.close()

    # -- the healer's thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self.check_interval_s if self._watches else None)
            except queue.Empty:
                item = None
            if item is _STOP or self._stop.is_set():
                return
            if isinstance(item, tuple):
                log, corrupt = item
                try:
                    self._heal(log, corrupt)
                except Exception:  # a bug must not end healing for good
                    _logger.exception("replica.heal_crashed", topic=log.topic, partition=log.partition)
            self._check_watches()

    def _heal(self, log: Log, corrupt: CorruptRange) -> None:
        key = (log.topic, log.partition)
        replica = self._replicas(key)
        if replica is None or replica.log is not log:
            return  # not a replica (a 0.7-style topic): reads refuse the range, as always
        logger = _logger.bind(topic=log.topic, partition=log.partition, offset=corrupt.offset,
                              bytes=corrupt.length, file=corrupt.path, position=corrupt.start)
        exit_ = self.isr_exit
        with replica.lock:
            pending = replica.pending_cut
            if not still_corrupt(log, corrupt) or (pending is not None and pending.corrupt.offset <= corrupt.offset):
                logger.debug("replica.heal_skipped", reason="the range is cut already, or will be")
                return
            cut = PendingCut(corrupt, replica.leader_epoch + (1 if exit_ is not None else 0))
            handed = exit_ is not None or replica.role is Role.FOLLOWER
            if handed:
                replica.pending_cut = cut  # made by the fetcher once due (heal_cut.py)
        logger.warning("replica.healing", role=replica.role.name.lower(), leader=replica.leader_id,
                       leader_epoch=replica.leader_epoch, log_end=log.end_offset, reason=corrupt.reason,
                       next="leave the ISR" if exit_ is not None else "cut and refetch")
        if not handed:
            logger.error("replica.unhealable", role=replica.role.name.lower(),
                         reason="no controller to move leadership to another in-sync replica",
                         hint="reads keep refusing the range; see rill-broker --verify-logs --repair")
            return
        if exit_ is not None and not self._leave_isr(exit_, replica, key, logger):
            _drop(replica, cut)
            return
        if not self._wait_until_not_leader(replica):
            _drop(replica, cut)
            logger.error("replica.heal_failed", reason=f"still the leader after {self.role_wait_s:g}s",
                         hint="the range stays refused; see rill-broker --verify-logs")
            return
        with replica.lock:  # out of the ISR now (if it was in): the cut is due in the epoch it is in
            cut.min_leader_epoch = min(cut.min_leader_epoch, replica.leader_epoch)
        self._watches.append(_Watch(replica, cut, corrupt.base_offset + corrupt.end, self._clock(), logger))

    def _leave_isr(self, exit_: IsrExit, replica: Replica, key: Key, logger: Any) -> bool:
        """Step 1, retried; False (logged) when the heal cannot go on."""
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                remaining = exit_.leave_isr([key])
            except IsrExitFailed as exc:
                logger.warning("replica.heal_leave_isr_failed", attempt=attempt, error=str(exc))
                if attempt == self.attempts or self._stop.wait(delay):
                    break
                delay = min(delay * 2, 10 * self.backoff_s)
                continue
            if key in remaining:
                logger.error("replica.unhealable", role=replica.role.name.lower(),
                             reason="no other in-sync replica holds these bytes",
                             hint="reads keep refusing the range; see rill-broker --verify-logs --repair")
                return False
            return True
        if not self._stop.is_set():
            logger.error("replica.heal_failed", reason=f"the controller did not take this replica out of the ISR "
                                                       f"in {self.attempts} attempts",
                         hint="the range stays refused; a restart finds it again")
        return False

    def _wait_until_not_leader(self, replica: Replica) -> bool:
        deadline = self._clock() + self.role_wait_s
        while replica.role is Role.LEADER:
            if self._clock() >= deadline or self._stop.wait(0.02):
                return False
        return True

    def _check_watches(self) -> None:
        """Steps 3 and 4 seen from here: log the replicas refetched past their range; drop those gone or stalled."""
        now = self._clock()
        self._watches = [watch for watch in self._watches if not self._settled(watch, now)]

    def _settled(self, watch: _Watch, now: float) -> bool:
        """Whether ``watch`` is over (logged here), under its replica's lock."""
        replica, cut, logger = watch.replica, watch.cut, watch.logger
        held = self._replicas((replica.topic, replica.partition)) is replica
        with replica.lock:
            if cut.done and cut.error is not None:
                logger.error("replica.heal_failed", reason=cut.error, hint="see rill-broker --verify-logs")
            elif cut.done and replica.log.end_offset >= watch.target:
                self.healed += 1
                logger.info("replica.healed", log_end=replica.log.end_offset, leader=replica.leader_id,
                            refetched=replica.log.end_offset - cut.corrupt.offset,
                            seconds=round(now - watch.started, 3))
            elif not cut.done and replica.pending_cut is not cut:
                logger.debug("replica.heal_superseded", reason="a cut further back replaced it")
            elif not cut.done and replica.role is Role.LEADER:
                replica.pending_cut = None
                logger.error("replica.heal_failed", reason="elected leader again before the cut",
                             hint="the range stays refused; see rill-broker --verify-logs")
            elif not held:
                _drop(replica, cut)
                logger.info("replica.heal_abandoned", reason="the replica is no longer held here")
            elif now - watch.started > self.heal_timeout_s:
                _drop(replica, cut)
                logger.warning("replica.heal_stalled", log_end=replica.log.end_offset, target=watch.target,
                               cut=cut.done, seconds=round(now - watch.started, 3),
                               detail="not fetched from a leader, or the leader's log ends before the range did")
            else:
                return False
        return True


def _drop(replica: Replica, cut: PendingCut) -> None:
    """Take back ``cut`` if it is still pending (the heal stops)."""
    with replica.lock:
        if replica.pending_cut is cut:
            replica.pending_cut = None

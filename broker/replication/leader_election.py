"""The controller's choice of a partition's leader: Kafka's election rules, as pure functions.

Each takes a partition's current state (``rill.client.zookeeper.replica_layout``'s
:class:`PartitionState`), its assignment (``replicas``, the preferred leader first) and
the live brokers, and returns the state to write, or None when nothing changes.
Every returned state carries the controller's epoch and a leader epoch one higher than
the current one (Kafka's ``newLeaderAndIsr``), so followers and clients holding the
old epoch are fenced. The rules (Kafka 2.8's ``PartitionLeaderElectionAlgorithms``):

- **Offline** (:func:`elect_offline`, the leader's broker died): the first replica in
  assignment order that is live and in the ISR; the new ISR is the live part of the
  old one. With none, and ``unclean`` (``unclean.leader.election.enable``), the first
  live replica, alone in the ISR: availability over committed data (seed 002). Otherwise
  the partition goes offline: leader -1, the ISR kept (its last member must come back,
  with whatever it has, for the partition to return without losing committed data).
- **Controlled shutdown** (:func:`elect_for_shutdown`): as offline, skipping the brokers
  that are shutting down, which also leave the ISR. No candidate: no change (the
  stopping broker keeps leading until it stops).
- **Preferred** (:func:`elect_preferred`): the first assigned replica, if live, in the
  ISR and not leading already.
- **A follower died** (:func:`remove_from_isr`): it leaves the ISR, unless it is the last
  member (Kafka keeps the last one, so the partition knows who holds its data).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState

__all__ = ["elect_offline", "elect_for_shutdown", "elect_preferred", "remove_from_isr"]


def _next(current: PartitionState, leader: int, isr: Sequence[int], controller_epoch: int) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=current.leader_epoch + 1, isr=tuple(isr),
                          controller_epoch=controller_epoch)


def elect_offline(current: PartitionState, replicas: Sequence[int], live: Collection[int], *, unclean: bool,
                  controller_epoch: int) -> PartitionState | None:
    """A new state when the leader is not live (or there is none), else None."""
    if current.leader != NO_LEADER and current.leader in live:
        return None
    live_isr = [b for b in current.isr if b in live]
    for candidate in replicas:
        if candidate in live_isr:
            return _next(current, candidate, live_isr, controller_epoch)
    if unclean:
        for candidate in replicas:
            if candidate in live:
                return _next(current, candidate, (candidate,), controller_epoch)
    if current.leader == NO_LEADER:
        return None  # already offline: nothing to write
    return _next(current, NO_LEADER, current.isr, controller_epoch)


def elect_for_shutdown(current: PartitionState, replicas: Sequence[int], live: Collection[int],
                       shutting_down: Collection[int], *, controller_epoch: int) -> PartitionState | None:
    """Move leadership (and ISR membership) off the brokers that are shutting down; None when it
    cannot or need not change."""
    staying_isr = [b for b in current.isr if b in live and b not in shutting_down]
    if current.leader not in shutting_down:
        if len(staying_isr) == len(current.isr) or not staying_isr:
            return None
        return _next(current, current.leader, staying_isr, controller_epoch)  # a stopping follower leaves the ISR
    for candidate in replicas:
        if candidate in staying_isr:
            return _next(current, candidate, staying_isr, controller_epoch)
    return None


def elect_preferred(current: PartitionState, replicas: Sequence[int], live: Collection[int], *,
                    controller_epoch: int) -> PartitionState | None:
    """Give leadership back to the first assigned replica when it can take it; else None."""
    preferred = replicas[0]
    if current.leader == preferred or preferred not in live or preferred not in current.isr:
        return None
    return _next(current, preferred, current.isr, controller_epoch)


def remove_from_isr(current: PartitionState, broker: int, *, controller_epoch: int) -> PartitionState | None:
    """A dead follower leaves the ISR (never the last member, and never the leader, which
    :func:`elect_offline` handles); None when it was not in it."""
    if broker == current.leader or broker not in current.isr or len(current.isr) == 1:
        return None
    return _next(current, current.leader, [b for b in current.isr if b != broker], controller_epoch)

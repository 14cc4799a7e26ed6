"""The controller's election rules: offline, controlled shutdown, preferred leader, a dead follower."""

from __future__ import annotations

from rill.broker.replication.leader_election import elect_for_shutdown, elect_offline, elect_preferred, remove_from_isr
from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState

REPLICAS = (1, 2, 3)


def state(leader: int, isr: tuple[int, ...], epoch: int = 4) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1)


def test_offline_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() -> None:
    """Broker 1 dies: 2 leads (before 3, by assignment order), the ISR loses 1, the epochs move on."""
    new = elect_offline(state(1, (3, 2, 1)), REPLICAS, {2, 3}, unclean=False, controller_epoch=9)
    assert new == PartitionState(leader=2, leader_epoch=5, isr=(3, 2), controller_epoch=9)


def test_live_leader_is_left_alone() -> None:
    """An offline election changes nothing while the leader lives."""
    assert elect_offline(state(1, (1, 2)), REPLICAS, {1, 2, 3}, unclean=False, controller_epoch=9) is None


def test_no_live_isr_member_leaves_the_partition_offline_with_its_last_isr() -> None:
    """Clean elections only: a live replica outside the ISR is never elected; the ISR is kept for its return."""
    new = elect_offline(state(1, (1,)), REPLICAS, {3}, unclean=False, controller_epoch=9)
    assert new is not None
    assert (new.leader, new.isr, new.leader_epoch) == (NO_LEADER, (1,), 5)
    assert elect_offline(new, REPLICAS, {3}, unclean=False, controller_epoch=9) is None


def test_unclean_election_picks_a_live_out_of_sync_replica_alone_in_the_isr() -> None:
    """With unclean.leader.election.enable the first live replica leads, alone in the ISR."""
    new = elect_offline(state(1, (1,)), REPLICAS, {3, 2}, unclean=True, controller_epoch=9)
    assert new is not None
    assert (new.leader, new.isr) == (2, (2,))


def test_controlled_shutdown_moves_leadership_and_isr_membership_away() -> None:
    """The stopping leader hands over to the next ISR member; a stopping follower just leaves the ISR."""
    moved = elect_for_shutdown(state(1, (1, 2, 3)), REPLICAS, {1, 2, 3}, {1}, controller_epoch=9)
    assert moved is not None and (moved.leader, moved.isr) == (2, (2, 3))
    follower = elect_for_shutdown(state(2, (1, 2, 3)), REPLICAS, {1, 2, 3}, {1}, controller_epoch=9)
    assert follower is not None and (follower.leader, follower.isr) == (2, (2, 3))
    assert elect_for_shutdown(state(2, (2, 3)), REPLICAS, {1, 2, 3}, {1}, controller_epoch=9) is None


def test_controlled_shutdown_with_no_other_isr_member_keeps_the_leader() -> None:
    """A leader alone in the ISR keeps leading until it stops (moving would lose committed data)."""
    assert elect_for_shutdown(state(1, (1,)), REPLICAS, {1, 2, 3}, {1}, controller_epoch=9) is None


def test_preferred_leader_takes_back_leadership_only_when_in_sync() -> None:
    """The first assigned replica leads again once live and in the ISR."""
    back = elect_preferred(state(2, (2, 1)), REPLICAS, {1, 2}, controller_epoch=9)
    assert back is not None and back.leader == 1
    assert elect_preferred(state(2, (2,)), REPLICAS, {1, 2}, controller_epoch=9) is None
    assert elect_preferred(state(1, (1, 2)), REPLICAS, {1, 2}, controller_epoch=9) is None


def test_dead_follower_leaves_the_isr_but_never_the_last_member() -> None:
    """Removing a dead follower bumps the epoch; the last ISR member and the leader are never removed here."""
    new = remove_from_isr(state(1, (1, 3)), 3, controller_epoch=9)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (1, (1,), 5)
    assert remove_from_isr(state(NO_LEADER, (3,)), 3, controller_epoch=9) is None
    assert remove_from_isr(state(1, (1, 3)), 1, controller_epoch=9) is None

"""The leader's view of its followers: caught-up times, ISR shrink and expand, the high watermark."""

from __future__ import annotations

from rill.broker.replication.leader_state import UNKNOWN_OFFSET, LeaderState

LAG = 10_000.0


def leader(isr: tuple[int, ...] = (1, 2, 3), *, hw: int = 0, start: int = 0, now: float = 0.0) -> LeaderState:
    return LeaderState(1, 5, (1, 2, 3), isr, zk_version=7, high_watermark=hw, epoch_start_offset=start, now_ms=now)


def test_high_watermark_is_the_smallest_log_end_in_the_isr() -> None:
    """With both followers heard from, the HW is the lower of their fetch offsets."""
    state = leader()
    state.on_follower_fetch(2, 300, 1.0, leader_end=500)
    assert state.high_watermark == 0  # follower 3 not heard from yet: it holds the HW
    state.on_follower_fetch(3, 200, 2.0, leader_end=500)
    assert state.high_watermark == 200
    state.on_follower_fetch(3, 500, 3.0, leader_end=500)
    assert state.high_watermark == 300


def test_high_watermark_never_goes_down() -> None:
    """A follower that fetches from a lower offset (after truncating) does not lower the leader's HW."""
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 400, 1.0, leader_end=400)
    assert state.high_watermark == 400
    state.on_follower_fetch(2, 100, 2.0, leader_end=400)
    assert state.high_watermark == 400


def test_leader_alone_in_the_isr_commits_its_own_end() -> None:
    """With an ISR of the leader alone, everything it has is committed."""
    state = leader(isr=(1,))
    assert state.update_high_watermark(leader_end=900)
    assert state.high_watermark == 900


def test_follower_one_fetch_behind_a_busy_leader_stays_caught_up() -> None:
    """Reaching the leader's end as of the previous fetch counts as caught up at that fetch's time."""
    state = leader()
    state.on_follower_fetch(2, 100, 1_000.0, leader_end=200)
    state.on_follower_fetch(2, 200, 2_000.0, leader_end=300)
    assert state.followers[2].last_caught_up_ms == 1_000.0
    state.on_follower_fetch(2, 300, 3_000.0, leader_end=300)
    assert state.followers[2].last_caught_up_ms == 3_000.0


def test_stuck_follower_leaves_the_isr_after_the_lag_time() -> None:
    """A follower behind the leader's end and not caught up for replica.lag.time.max.ms is proposed out."""
    state = leader(now=0.0)
    state.on_follower_fetch(2, 500, 1_000.0, leader_end=500)
    state.on_follower_fetch(3, 500, 1_000.0, leader_end=500)
    assert state.shrink_proposal(5_000.0, leader_end=800, lag_max_ms=LAG) is None
    state.on_follower_fetch(2, 800, 11_500.0, leader_end=800)
    assert state.shrink_proposal(11_500.0, leader_end=800, lag_max_ms=LAG) == frozenset({1, 2})


def test_idle_follower_at_the_leaders_end_stays_in_the_isr() -> None:
    """No appends for longer than the lag time does not shrink the ISR: the followers' ends equal the leader's."""
    state = leader()
    for b in (2, 3):
        state.on_follower_fetch(b, 500, 1_000.0, leader_end=500)
    assert state.shrink_proposal(60_000.0, leader_end=500, lag_max_ms=LAG) is None


def test_follower_joins_only_past_the_high_watermark_and_the_epoch_start() -> None:
    """Expansion needs the follower's end at or past the HW and past the offset where this epoch began."""
    state = leader(isr=(1, 2), hw=0, start=400)
    state.on_follower_fetch(2, 400, 1.0, leader_end=600)
    assert state.high_watermark == 400
    assert state.on_follower_fetch(3, 300, 1.0, leader_end=600) is None
    assert state.on_follower_fetch(3, 400, 2.0, leader_end=600) == frozenset({1, 2, 3})


def test_isr_change_takes_effect_only_when_applied() -> None:
    """A proposal changes nothing until apply_isr; while one is in flight no other is made."""
    state = leader(isr=(1, 2))
    proposal = state.on_follower_fetch(3, 0, 1.0, leader_end=0)
    assert proposal == frozenset({1, 2, 3})
    state.pending_isr = proposal
    assert state.isr == frozenset({1, 2})
    assert state.on_follower_fetch(3, 0, 2.0, leader_end=0) is None
    state.apply_isr(proposal, zk_version=8, leader_end=0)
    assert (state.isr, state.zk_version, state.pending_isr) == (frozenset({1, 2, 3}), 8, None)


def test_a_leader_that_cannot_shrink_the_isr_cannot_commit_past_its_followers() -> None:
    """Until the shrink is applied, a silent follower holds the HW: a replaced leader acknowledges nothing new."""
    state = leader(isr=(1, 2), now=0.0)
    state.on_follower_fetch(2, 100, 0.0, leader_end=100)
    assert state.high_watermark == 100
    assert state.update_high_watermark(leader_end=900) is False
    assert state.shrink_proposal(20_000.0, leader_end=900, lag_max_ms=LAG) == frozenset({1})
    assert state.high_watermark == 100
    state.apply_isr({1}, zk_version=8, leader_end=900)
    assert state.high_watermark == 900


def test_new_leader_starts_with_followers_unknown_and_isr_members_caught_up() -> None:
    """In a new epoch every follower's end is unknown; ISR members count as caught up at the election."""
    state = leader(isr=(1, 2), now=50.0)
    assert state.followers[2].log_end == UNKNOWN_OFFSET
    assert state.followers[2].last_caught_up_ms == 50.0
    assert state.followers[3].last_caught_up_ms == 0.0


def test_a_follower_joining_the_isr_holds_the_high_watermark_while_its_write_is_in_flight() -> None:
    """While the ISR write that adds a follower is in flight, that follower already holds the HW (Kafka's maximal
    ISR): once ZooKeeper lists it, the controller may elect it, so the HW must not have passed its log end."""
    state = leader(isr=(1, 2))
    state.on_follower_fetch(2, 500, 1.0, leader_end=500)
    proposal = state.on_follower_fetch(3, 500, 2.0, leader_end=500)
    assert proposal == frozenset({1, 2, 3}) and state.high_watermark == 500
    state.pending_isr = proposal  # the caller's ZooKeeper write is in flight
    state.on_follower_fetch(2, 900, 3.0, leader_end=900)  # the leader appended and follower 2 has it; 3 is silent
    assert state.high_watermark == 500
    state.apply_isr(proposal, zk_version=8, leader_end=900)
    assert state.high_watermark <= state.followers[3].log_end


def test_a_shrink_in_flight_keeps_the_leaving_follower_holding_the_high_watermark() -> None:
    """A proposed shrink changes nothing until written: the follower leaving still holds the HW."""
    state = leader(isr=(1, 2, 3))
    state.on_follower_fetch(2, 500, 1.0, leader_end=500)
    state.on_follower_fetch(3, 100, 1.0, leader_end=500)
    state.pending_isr = frozenset({1, 2})
    assert state.update_high_watermark(leader_end=500) is False
    assert state.high_watermark == 100

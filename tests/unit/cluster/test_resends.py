"""controller_actions.Resends: which brokers a LeaderAndIsr is sent again to, and when."""

from __future__ import annotations

from collections.abc import Callable

from rill.broker.cluster.controller_actions import MAX_RESEND_BACKOFF_S, Resends


def test_missed_brokers_are_resent_after_a_backoff_that_doubles_while_resends_fail() -> None:
    scheduled: list[float] = []
    resends = Resends(lambda delay, work: scheduled.append(delay), backoff_s=0.5)

    def resend() -> None:
        """A stand-in for the worker's resend."""

    resends.add({2}, resend)
    resends.add({3}, resend)  # one resend pending covers both
    assert scheduled == [0.5]
    assert resends.due(live={1, 2}) == {2}  # 3 left the live set: forgotten
    delays: list[float] = []
    for _ in range(6):  # every resend fails again
        resends.resending(True)
        resends.add({2}, resend)
        resends.resending(False)
        delays.append(scheduled[-1])
        resends.due(live={1, 2})
    assert delays == [1.0, 2.0, 4.0, MAX_RESEND_BACKOFF_S, MAX_RESEND_BACKOFF_S, MAX_RESEND_BACKOFF_S]
    resends.resending(True)
    resends.resending(False)  # a round that reached everyone
    resends.add({2}, resend)
    assert scheduled[-1] == 0.5


def test_nothing_failed_schedules_nothing() -> None:
    scheduled: list[tuple[float, Callable[[], None]]] = []
    resends = Resends(lambda delay, work: scheduled.append((delay, work)), backoff_s=0.5)
    resends.add(set(), lambda: None)
    assert scheduled == [] and resends.due(live={1}) == set()

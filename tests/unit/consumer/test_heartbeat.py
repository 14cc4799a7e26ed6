"""The heartbeat timer: when a heartbeat is due and when the session has surely expired."""

from __future__ import annotations

from rill.client.consumer.heartbeat import Heartbeat


def test_due_after_each_interval_from_the_last_send() -> None:
    """A heartbeat is due an interval after the last one was sent."""
    hb = Heartbeat(interval=3.0, session_timeout=10.0, now=100.0)
    assert not hb.due(102.9)
    assert hb.due(103.0)
    hb.sent(103.0)
    assert hb.next_due() == 106.0


def test_session_expires_a_session_timeout_after_the_last_answer() -> None:
    """Only answers refresh the session: sending alone does not."""
    hb = Heartbeat(interval=3.0, session_timeout=10.0, now=100.0)
    hb.sent(108.0)
    assert not hb.session_expired(110.0)
    assert hb.session_expired(110.1)
    hb.received(109.0)
    assert hb.session_deadline() == 119.0 and not hb.session_expired(115.0)


def test_reset_on_join_takes_the_coordinators_session_timeout() -> None:
    """A completed registration counts as a heartbeat and sets the session timeout the coordinator gave."""
    hb = Heartbeat(interval=1.0, session_timeout=10.0, now=0.0)
    hb.reset(50.0, session_timeout=6.0)
    assert hb.session_deadline() == 56.0 and hb.next_due() == 51.0

"""The group state machine table and its guarded transition."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rill.coordinator.state import VALID_PREVIOUS_STATES, GroupState, IllegalStateTransition, transition


@dataclass
class _G:
    name: str
    state: GroupState


def test_every_state_has_a_row() -> None:
    """The table names the legal previous states of every state."""
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)


@pytest.mark.parametrize("old", list(GroupState))
@pytest.mark.parametrize("new", list(GroupState))
def test_transition_follows_the_table(old: GroupState, new: GroupState) -> None:
    """A transition succeeds exactly when the table allows it, and raises otherwise."""
    group = _G("g", old)
    if old in VALID_PREVIOUS_STATES[new]:
        transition(group, new)
        assert group.state is new
    else:
        with pytest.raises(IllegalStateTransition):
            transition(group, new)
        assert group.state is old


def test_dead_is_final() -> None:
    """Nothing follows DEAD."""
    assert all(GroupState.DEAD not in previous for previous in VALID_PREVIOUS_STATES.values())

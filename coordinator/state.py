"""The group state machine, as data (Kafka's ClassicGroupState; h11's ``_state.py``).

Everything that decides whether a group may change state is here: the states, the
table of legal previous states, and one guarded :func:`transition`. The state is
live-only (members are not persisted): after a restart every group starts EMPTY
and its members re-register.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

import structlog

_logger = structlog.get_logger(__name__)


class GroupState(Enum):
    """The state of a consumer group.

    EMPTY
        action: the group has no members; it keeps its settings, its last
        generation and assignment, and its committed offsets. Commits without a
        consumer id are accepted; RegisterConsumer starts a rebalance.
        transition: a member registers -> PREPARING_REBALANCE;
        DeleteGroup (non-ephemeral groups) -> DEAD.
    PREPARING_REBALANCE
        action: the coordinator waits for every live member to (re-)register.
        Members that have not get REBALANCE_IN_PROGRESS in their heartbeats; their
        commits for the current generation are still accepted (seed 003: they
        commit, then re-register).
        transition: every member has registered, or the rebalance timeout passed
        (absentees are removed) -> STABLE, with a new generation;
        no member is left -> EMPTY (non-ephemeral) or DEAD (ephemeral).
    STABLE
        action: members own their partitions, heartbeat and commit with the
        current generation.
        transition: a member registers, leaves or misses its session timeout, or a
        subscribed topic gains partitions -> PREPARING_REBALANCE.
    DEAD
        action: the group is gone (deleted, or an ephemeral group lost its last
        member); nothing else happens to this object.
        transition: none.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.EMPTY, GroupState.STABLE}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset({GroupState.EMPTY, GroupState.PREPARING_REBALANCE, GroupState.STABLE}),
}


class IllegalStateTransition(RuntimeError):
    """A group was asked to move to a state that does not follow its current one."""


class Stateful(Protocol):
    """Anything with a name and a mutable group state (the Group)."""

    name: str
    state: GroupState


def transition(group: Stateful, new_state: GroupState) -> None:
    """Move ``group`` to ``new_state``.

    Raises:
        IllegalStateTransition: when ``group.state`` is not a legal previous state
            of ``new_state`` (a coordinator bug, never a client error).
    """
    if group.state not in VALID_PREVIOUS_STATES[new_state]:
        raise IllegalStateTransition(
            f"group {group.name}: {group.state.value} -> {new_state.value} is not a legal transition")
    _logger.debug("group.transition", group=group.name, old=group.state.value, new=new_state.value)
    group.state = new_state

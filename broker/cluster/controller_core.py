"""What the controller's mixins use of the Controller (reassignments, deletions, growth, ISR exits, leader moves).

The Controller (controller.py) is assembled from mixins, each one concept in its own module;
they call back into the Controller's own machinery. :class:`ControllerCore` declares that
machinery once, as a protocol the mixins inherit, so each is type-checked against it and
the Controller, which defines every method, satisfies it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol, TypeVar

from rill.broker.cluster.controller_actions import Decide
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import PartitionKey
from rill.broker.replication.replica import PartitionRole

__all__ = ["ControllerCore"]

T = TypeVar("T")


class ControllerCore(Protocol):
    def _call(self, work: Callable[[], T], timeout_s: float, what: str) -> T:
        """Run ``work`` on the controller's thread and wait for its result."""
        ...

    def _post(self, task: Callable[[], None]) -> None:
        """Run ``task`` on the controller's thread, soon."""
        ...

    def _later(self, delay_s: float, work: Callable[[], None]) -> None:
        """Run ``work`` on the controller's thread after ``delay_s``."""
        ...

    def _active(self) -> ControllerContext:
        """The context while this broker is the controller (NotController otherwise)."""
        ...

    def _checked_broker(self, broker_id: int, broker_epoch: int | None) -> ControllerContext:
        """The context, once ``broker_id`` is live and in ``broker_epoch``."""
        ...

    def _elect(self, ctx: ControllerContext, keys: Sequence[PartitionKey],
               decide: Decide) -> tuple[list[PartitionKey], int]:
        """Elect for ``keys`` as ``decide`` says; write the states."""
        ...

    def _send(self, ctx: ControllerContext, targets: Collection[int], roles: Iterable[PartitionRole], *,
              full: bool) -> None:
        """Send ``roles`` to ``targets`` in a LeaderAndIsr."""
        ...

    def _reassigning(self) -> set[PartitionKey]:
        """The partitions being reassigned now."""
        ...

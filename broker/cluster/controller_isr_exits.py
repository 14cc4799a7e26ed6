"""The controller's LeaveIsr: a broker with a damaged copy of some partitions leaves their ISRs.

A mixin of :class:`~rill.broker.cluster.controller.Controller` (it uses its worker, its
ZooKeeper session and its sends). A broker that found corrupt data in a replica heals it
from another in-sync replica (broker/replication/replica_healer.py): before it cuts its
log back below the high watermark it must stop counting as in sync, or an election
could pick it and lose committed data, and where it leads another replica must take over
first, since a leader never cuts committed data. This is a controlled shutdown's election
(``leader_election.elect_for_shutdown``) for the named partitions only:

- the broker leads: the first replica in assignment order that is live, in the ISR and
  not shutting down leads in a new epoch, and the broker leaves the ISR; with none, nothing
  changes (the partition is in ``remaining``: its data cannot be healed from a replica);
- it follows in the ISR: it leaves the ISR, in a new leader epoch (so the leader's own
  later ISR writes start from the controller's state); as the ISR's last member, nothing
  changes;
- it is not in the ISR: nothing changes.

Why a call of its own rather than ControlledShutdown: that one moves *every* partition off
the broker and marks it shutting down (it then rejoins no ISR), and ElectLeaders elects the
preferred replica, which may be the damaged one. Kafka has no equivalent (it leaves bad
bytes on disk to its consumers' CRC checks).

The new states are written behind the controller's epoch check and sent, as
LeaderAndIsr, to every live broker before the answer: the asking broker has applied its
new role (a follower, out of the ISR) when the call returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

from kazoo.client import KazooClient

from rill.broker.cluster.controller_actions import Decide, log_elections, reread
from rill.broker.cluster.controller_core import ControllerCore
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import PartitionKey
from rill.broker.cluster.replica_control_servicer import BrokerNotAvailable, StaleBrokerEpoch
from rill.broker.cluster.replicated_topics import read_broker_epoch
from rill.broker.replication.leader_election import elect_for_shutdown
from rill.broker.replication.replica import PartitionRole

__all__ = ["ControllerIsrExits"]

T = TypeVar("T")


class ControllerIsrExits(ControllerCore):
    """LeaveIsr for the Controller (module docstring). Uses the attributes and methods declared here."""

    zk: KazooClient
    log: Any


    def leave_isr(self, broker_id: int, broker_epoch: int | None, partitions: Sequence[PartitionKey], *,
                  timeout_s: float = 30.0) -> list[PartitionKey]:
        """Take ``broker_id`` out of the ISRs of ``partitions``, electing another leader where it leads. Any thread.

        ``broker_epoch``: the czxid of its ``/brokers/ids/[id]`` node (None: not checked).

        Returns:
            The partitions asked whose ISR still lists it (it is their only live in-sync
            replica, or the controller does not know them), in (topic, partition) order.

        Raises:
            NotController, BrokerNotAvailable, StaleBrokerEpoch, TimeoutError: as ``Controller.controlled_shutdown``.
        """
        return self._call(lambda: self._leave_isr(broker_id, broker_epoch, partitions), timeout_s,
                          f"broker {broker_id} leaving the ISRs of {len(partitions)} partition(s)")

    def _leave_isr(self, broker_id: int, broker_epoch: int | None,
                   partitions: Sequence[PartitionKey]) -> list[PartitionKey]:
        ctx = self._checked_broker(broker_id, broker_epoch)
        started = time.monotonic()
        keys = sorted({key for key in partitions if key in ctx.states})
        keys = reread(self.zk, ctx, keys)  # the leaders' own ISR changes (as for a controlled shutdown)
        live, epoch = frozenset(ctx.live), ctx.epoch.epoch
        leaving = frozenset(ctx.shutting_down | {broker_id})
        changed, lost = self._elect(ctx, keys, lambda key, state: elect_for_shutdown(
            state, ctx.replicas(key), live, leaving, controller_epoch=epoch))
        written = time.monotonic()
        self._send(ctx, ctx.live, ctx.roles(changed), full=False)
        log_elections(self.log, "leave_isr", ctx, [broker_id], keys, changed, lost, started, written)
        return sorted({key for key in partitions if key not in ctx.states or broker_id in ctx.states[key][0].isr})

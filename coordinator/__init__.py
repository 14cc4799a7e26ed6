"""rill.coordinator: server-side group coordination (seed 003).

The group state machine (``state``), assignors (``assignors``), the coordinator
that answers the membership, offset and rewind RPCs (``coordinator``), its injected
time (``clock``) and view of the topics (``catalog``); the offsets log and the gRPC
servicers build on them.
"""

from __future__ import annotations

from rill.coordinator.topic_catalog import Catalog, StaticCatalog
from rill.client.clock import Clock, FakeClock, FakeTimer, SystemClock, ThreadTimer, Timer, TimerHandle
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.describe import GroupDescription, MemberDescription
from rill.coordinator.pending import PendingJoin
from rill.coordinator.state import GroupState

__all__ = [
    "Catalog", "Clock", "FakeClock", "FakeTimer", "GroupCoordinator", "GroupDescription", "GroupState",
    "MemberDescription", "PendingJoin", "StaticCatalog", "SystemClock", "ThreadTimer", "Timer", "TimerHandle",
]

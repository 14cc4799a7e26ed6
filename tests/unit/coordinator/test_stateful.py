"""A hypothesis state machine driving one group through joins, heartbeats, leaves, time, commits and rewinds."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from unittest import mock

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rill.coordinator import membership_protocol
from rill.coordinator.assignors import ASSIGNORS
from rill.coordinator.pending import PendingJoin
from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import TIMEOUT_MS, Harness

MESSAGES = 20   # per partition, 10-byte payloads: boundaries 0, 14, ..., 266; end 280
STEP = 14
END = MESSAGES * STEP
TP = tuple[str, int]


class GroupMachine(RuleBasedStateMachine):
    """Members act like seed 003 consumers (some misbehave: they go silent, or commit as zombies)."""

    def __init__(self) -> None:
        super().__init__()
        ids = itertools.count()  # member ids must not depend on uuid4, or hypothesis cannot replay a run
        self.ids = mock.patch.object(membership_protocol, "uuid", SimpleNamespace(
            uuid4=lambda: SimpleNamespace(hex=f"{next(ids):032x}")))
        self.ids.start()
        self.h = Harness({"t": 5, "u": 2})
        for topic, count in self.h.catalog.topics().items():
            for p in range(count):
                self.h.catalog.append(topic, p, [10] * MESSAGES)
        self.pending: list[PendingJoin] = []
        self.answers: list[pb.RegisterConsumerResponse] = []   # every successful RegisterConsumerResponse
        self.latest: dict[str, pb.RegisterConsumerResponse] = {}
        self.committed: dict[TP, int] = {}
        self.rewound: set[TP] = set()            # rewound by the step just run
        self.previous: dict[TP, int] = {}        # committed offsets after the previous step
        self.grown: set[TP] = set()              # partitions added by grow_topic (the coordinator may commit 0)

    @initialize(strategy=st.sampled_from(sorted(ASSIGNORS)))
    def create_group(self, strategy: str) -> None:
        assert self.h.create(topics=["t", "u"], assignment_strategy=strategy).error_code == pb.NONE

    def teardown(self) -> None:
        self.ids.stop()

    # ------------------------------------------------------------------ helpers

    def _collect(self) -> None:
        still = []
        for join in self.pending:
            response = join.response()
            if response is None:
                still.append(join)
            elif response.error_code == pb.NONE:
                self.answers.append(response)
                self.latest[response.consumer_id] = response
        self.pending = still

    def _generation(self) -> int:
        described = self.h.coord.describe("g")
        assert described is not None
        return described.generation

    def _all_partitions(self) -> set[TP]:
        return {(t, p) for t, n in self.h.catalog.topics().items() if t in ("t", "u") for p in range(n)}

    # ------------------------------------------------------------------ rules

    @rule()
    def register_new(self) -> None:
        self.pending.append(self.h.register())
        self._collect()

    @precondition(lambda self: self.latest)
    @rule(data=st.data())
    def re_register(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from(sorted(self.latest)))
        self.pending.append(self.h.register(consumer_id=member))
        self._collect()

    @precondition(lambda self: self.latest)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        member = self.latest[data.draw(st.sampled_from(sorted(self.latest)))]
        code = self.h.heartbeat(member)
        event(f"heartbeat: {pb.ErrorCode.Name(code)}")
        assert code in (pb.NONE, pb.REBALANCE_IN_PROGRESS, pb.ILLEGAL_GENERATION, pb.UNKNOWN_MEMBER)
        if code == pb.REBALANCE_IN_PROGRESS:  # a well-behaved consumer re-registers
            self.pending.append(self.h.register(consumer_id=member.consumer_id))
        self._collect()

    @precondition(lambda self: self.latest)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        member = self.latest.pop(data.draw(st.sampled_from(sorted(self.latest))))
        self.h.leave(member)
        self._collect()

    @rule(seconds=st.sampled_from([0.5, 3.0, 6.0, TIMEOUT_MS / 1000 + 1]))
    def advance(self, seconds: float) -> None:
        self.h.clock.advance(seconds)
        self._collect()

    @precondition(lambda self: self.latest)
    @rule(data=st.data(), steps=st.integers(0, 3))
    def commit_forward(self, data: st.DataObject, steps: int) -> None:
        member = self.latest[data.draw(st.sampled_from(sorted(self.latest)))]
        mine = sorted((p.topic, p.partition) for p in member.partitions_to_own)
        if not mine:
            return
        tp = data.draw(st.sampled_from(mine))
        offset = min(END, max(self.committed.get(tp, 0), 0) + steps * STEP)
        response = self.h.commit({tp: offset}, member)
        if response.error_code == pb.NONE:
            described = self.h.coord.describe("g")
            assert described is not None and member.generation == described.generation
            assert tp in described.assignment[member.consumer_id]
            self.committed[tp] = offset
        event(f"member commit: {pb.ErrorCode.Name(response.error_code)}")

    @precondition(lambda self: self.answers)
    @rule(data=st.data())
    def zombie_commit(self, data: st.DataObject) -> None:
        stale = [a for a in self.answers if a.generation < self._generation() and a.partitions_to_own]
        if not stale:
            return
        zombie = data.draw(st.sampled_from(stale))
        before = self.h.fetch()
        tps = {(p.topic, p.partition): 0 for p in zombie.partitions_to_own}
        assert self.h.commit(tps, zombie).error_code in (pb.ILLEGAL_GENERATION, pb.UNKNOWN_MEMBER)
        assert self.h.fetch() == before
        event("zombie commit refused")

    @rule(data=st.data(), how=st.sampled_from([pb.OFFSET, pb.EARLIEST, pb.LATEST]))
    def rewind(self, data: st.DataObject, how: int) -> None:
        tps = data.draw(st.sets(st.sampled_from(sorted(self._all_partitions())), min_size=1, max_size=3))
        entries = {tp: data.draw(st.integers(0, MESSAGES)) * STEP for tp in tps}
        response = self.h.rewind(entries, target=how)
        assert response.error_code == pb.NONE
        for o in response.actual_offsets:
            self.committed[(o.topic, o.partition)] = o.offset
        self.rewound |= tps

    @precondition(lambda self: self.h.catalog.topics()["u"] < 4)
    @rule()
    def grow_topic(self) -> None:
        count = self.h.catalog.topics()["u"] + 1
        self.h.catalog.create_topic("u", count)
        self.h.catalog.append("u", count - 1, [10] * MESSAGES)
        self.grown.add(("u", count - 1))
        self.h.coord.on_topics_changed()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def no_partition_has_two_owners_in_a_generation(self) -> None:
        owners: dict[tuple[int, TP], str] = {}
        for answer in self.answers:
            for p in answer.partitions_to_own:
                key = (answer.generation, (p.topic, p.partition))
                assert owners.setdefault(key, answer.consumer_id) == answer.consumer_id
        described = self.h.coord.describe("g")
        assert described is not None
        every = [tp for tps in described.assignment.values() for tp in tps]
        assert len(every) == len(set(every))

    @invariant()
    def a_stable_group_owns_every_partition(self) -> None:
        described = self.h.coord.describe("g")
        assert described is not None
        if described.state == "Stable":
            live = {m.consumer_id for m in described.members}
            assert live <= set(described.assignment)
            owned = {tp for mid, tps in described.assignment.items() if mid in live for tp in tps}
            assert owned == self._all_partitions()

    @invariant()
    def offsets_move_back_only_by_rewind(self) -> None:
        now = self.h.fetch()
        for tp, offset in now.items():
            if tp not in self.committed and tp in self.grown and offset == 0:
                self.committed[tp] = 0  # a partition added while the group had members starts at 0
            assert offset == self.committed[tp]  # nothing but accepted commits and rewinds moved it
            if offset < self.previous.get(tp, -1):
                assert tp in self.rewound
        self.previous, self.rewound = now, set()


GroupMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)
TestGroupMachine = GroupMachine.TestCase

"""Healing corrupt data from an in-sync replica: three in-process brokers on a real ZooKeeper.

A byte is flipped in the middle of a message of one replica's segment file and the
scrubber's check finds it. A leader first has the controller elect another in-sync
replica (LeaveIsr), then, as a follower, cuts its log back and refetches; a follower
leaves the ISR and does the same. Each rejoins the ISR, every replica ends byte for byte
the same, and every acknowledged message reads back intact. A partition whose ISR is its
leader alone cannot be healed: the range stays refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import structlog
from kazoo.client import KazooClient

from rill.broker.cluster.replicated_topics import create_topic
from rill.broker.log.integrity import CorruptDataError
from rill.broker.log.log import Log
from rill.broker.log.scrubber import Scrubber
from rill.broker.replication.replica import Role
from rill.broker.testing import RunningBroker
from tests.process.replication_checker import read_final_log
from tests.zookeeper.replicated_support import (Brokers, create_replicated, leader_of, produce_acked,
                                                 replicated_cluster, wait_leaders)
from tests.zookeeper.test_broker_registration import wait_for

TOPIC, SOLE = "healed", "sole"


def flip_byte(log: Log, offset: int) -> None:
    """Rot one byte of ``log``'s segment file, behind the broker's back."""
    segment = [s for s in log.segments if s.base_offset <= offset][-1]
    with open(segment.path, "r+b") as f:
        f.seek(offset - segment.base_offset)
        byte = f.read(1)
        f.seek(offset - segment.base_offset)
        f.write(bytes([byte[0] ^ 0x5A]))


def scrub(b: RunningBroker, topic: str) -> None:
    """The scrubber's check of ``b``'s replica of ``topic``-0, run now (it reports to the broker's healer)."""
    log = b.broker.logs.get(topic, 0)
    Scrubber(lambda: [log], bytes_per_second=1 << 30, interval_s=3600).scrub_pass()


def segment_files(b: RunningBroker, topic: str) -> bytes:
    directory = os.path.join(b.broker.logs.data_dir, f"{topic}-0")
    return b"".join(Path(directory, n).read_bytes() for n in sorted(os.listdir(directory)) if n.endswith(".log"))


def isr(b: RunningBroker, topic: str) -> frozenset[int]:
    state = b.broker.replicas.replicas[(topic, 0)].leader_state
    return frozenset() if state is None else frozenset(state.isr)


def heal_and_check(brokers: Brokers, victim: RunningBroker, acked: list[tuple[int, bytes]]) -> None:
    """Corrupt ``victim``'s copy in the middle of the log, scrub it, and wait until it is healed and in sync."""
    offset, value = acked[len(acked) // 2]
    healed = victim.broker.healer.healed
    flip_byte(victim.broker.logs.get(TOPIC, 0), offset + 10 + len(value) // 2)  # inside the payload
    scrub(victim, TOPIC)
    wait_for(lambda: victim.broker.healer.healed == healed + 1, timeout=30, what=f"broker {victim.broker_id} healed")
    wait_for(lambda: (leader := leader_of(brokers, TOPIC, 0)) is not None and isr(leader, TOPIC) == set(brokers),
             timeout=30, what=f"broker {victim.broker_id} back in the ISR")
    end = acked[-1][0] + 10 + len(acked[-1][1])
    wait_for(lambda: all(b.broker.logs.get(TOPIC, 0).end_offset == end for b in brokers.values()), timeout=30,
             what="every replica at the leader's end")
    assert len({segment_files(b, TOPIC) for b in brokers.values()}) == 1
    leader = leader_of(brokers, TOPIC, 0)
    assert leader is not None
    assert read_final_log(leader.host, leader.port, TOPIC, 0) == acked


@pytest.mark.timeout(180)
def test_corrupt_leader_hands_over_heals_and_rejoins_then_a_follower_does(tmp_path: Path, zk_connect: str,
                                                                         zk: KazooClient) -> None:
    """A corrupt leader: leadership moves to another ISR member, the old leader refetches and rejoins the ISR;
    then a corrupt follower does the same; every acknowledged message reads back intact; a partition whose
    ISR is its leader alone keeps refusing its range."""
    with replicated_cluster(tmp_path, zk_connect) as brokers:
        create_replicated(zk, brokers, TOPIC, 1)
        acked = produce_acked(brokers, TOPIC, 0, [f"message-{i:03d}-".encode() * 5 for i in range(60)])
        first = leader_of(brokers, TOPIC, 0)
        assert first is not None
        with structlog.testing.capture_logs() as events:
            heal_and_check(brokers, first, acked)
        now = leader_of(brokers, TOPIC, 0)
        assert now is not None and now is not first
        assert first.broker.replicas.replicas[(TOPIC, 0)].role is Role.FOLLOWER
        mine = [e["event"] for e in events if str(e["event"]).startswith("replica.heal")]
        assert mine[:3] == ["replica.healing", "replica.heal_truncated", "replica.healed"]
        assert any(e["event"] == "controller.elections" and e["reason"] == "leave_isr" for e in events)

        acked += produce_acked(brokers, TOPIC, 0, [f"after-{i:03d}".encode() for i in range(20)])
        follower = next(b for b in brokers.values() if b is not now)
        heal_and_check(brokers, follower, acked)

        create_topic(zk, SOLE, 1, 1, None, [first.broker_id])
        wait_leaders(brokers, SOLE, 1)
        sole = produce_acked(brokers, SOLE, 0, [f"only-{i:03d}-".encode() * 5 for i in range(10)])
        owner = leader_of(brokers, SOLE, 0)
        assert owner is not None
        log = owner.broker.logs.get(SOLE, 0)
        end = log.end_offset
        offset, value = sole[5]
        with structlog.testing.capture_logs() as events:
            flip_byte(log, offset + 10 + len(value) // 2)
            scrub(owner, SOLE)
            wait_for(lambda: any(e["event"] == "replica.unhealable" for e in events), timeout=30,
                     what="the sole replica to give up")
        assert log.end_offset == end and leader_of(brokers, SOLE, 0) is owner
        with pytest.raises(CorruptDataError):
            log.read(offset, 1000)

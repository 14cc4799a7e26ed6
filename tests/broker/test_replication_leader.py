"""A broker leading a replicated partition, over real TCP: followers' fetches, the high watermark, acks=all.

The broker is told its role the way the controller tells it (ReplicaManager.apply_roles);
follower 7 is played by raw REPLICA_FETCH requests from the test, so every answer is
checked byte for byte. No ZooKeeper here: ISR changes apply without a conditional write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.replication.replica import PartitionRole
from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchBlock, ReplicaFetchPartition,
                                                ReplicaFetchRequest, decode_replica_fetch_response,
                                                encode_replica_fetch)
from tests.conftest import RawClient

ME, FOLLOWER, EPOCH = 0, 7, 1


def make_role(leader: int = ME, epoch: int = EPOCH, isr: tuple[int, ...] = (ME, FOLLOWER),
              min_insync: int = 0) -> PartitionRole:
    return PartitionRole("rep", 0, leader, epoch, isr, (ME, FOLLOWER), 0, min_insync)


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "data", replica_lag_time_max_ms=60_000) as b:
        others = [rq.BrokerInfo(FOLLOWER, "127.0.0.1", 1, 0)]
        assert b.broker.replicas.apply_roles(0, 1, [make_role()], others) == {("rep", 0): 0}
        yield b


def replica_fetch(raw: RawClient, offset: int, *, last_epoch: int = EPOCH, current: int = EPOCH,
                  replica: int = FOLLOWER, wait_ms: int = 0) -> ReplicaFetchBlock:
    request = ReplicaFetchRequest(replica, wait_ms, 1, [ReplicaFetchPartition("rep", 0, current, offset, last_epoch,
                                                                              1 << 20)])
    error, blocks = decode_replica_fetch_response(raw.request(encode_replica_fetch(request)))
    assert error == 0
    return blocks[0]


def produce(raw: RawClient, payloads: list[bytes], acks: int = rq.Acks.APPEND) -> rq.PartitionAck:
    frame = rq.encode_produce_ack([rq.ProduceRequest("rep", 0, encode_message_set(payloads))], acks, 10_000)
    error, acks_ = rq.decode_produce_ack_response(raw.request(frame))
    assert error == 0
    return acks_[0]


def test_follower_gets_the_leaders_bytes_with_their_epoch_and_moves_the_high_watermark(leader: RunningBroker) -> None:
    """The follower's fetch returns the appended bytes in epoch 1; its next fetch (its new log end) commits them."""
    raw = RawClient(leader.host, leader.port)
    ack = produce(raw, [b"one", b"two"])
    block = replica_fetch(raw, 0, last_epoch=NO_EPOCH)
    assert (block.error, block.epoch, block.high_watermark) == (0, EPOCH, 0)
    assert bytes(block.messages) == encode_message_set([b"one", b"two"])
    again = replica_fetch(raw, ack.next_offset)
    assert again.high_watermark == ack.next_offset and len(again.messages) == 0


def test_consumers_read_only_below_the_high_watermark(leader: RunningBroker) -> None:
    """FETCH and OFFSETS latest stop at the high watermark until the follower has the data."""
    raw = RawClient(leader.host, leader.port)
    first = produce(raw, [b"a"])
    replica_fetch(raw, 0, last_epoch=NO_EPOCH)
    replica_fetch(raw, first.next_offset)  # committed: a
    produce(raw, [b"b"])  # not committed yet
    error, data = rq.decode_fetch_response(raw.request(rq.encode_fetch("rep", 0, 0, 1 << 20)))
    assert (error, bytes(data)) == (0, encode_message_set([b"a"]))
    assert rq.decode_offsets_response(raw.request(rq.encode_offsets("rep", 0, rq.LATEST_TIME, 1))) == (
        0, [first.next_offset])


def test_acks_all_is_answered_once_the_follower_has_the_messages(leader: RunningBroker) -> None:
    """An acks=all produce waits for the in-sync follower's fetch past its messages, then answers their offsets."""
    producer, follower = RawClient(leader.host, leader.port), RawClient(leader.host, leader.port)
    answers: list[rq.PartitionAck] = []
    thread = threading.Thread(target=lambda: answers.append(produce(producer, [b"x" * 50], rq.Acks.ALL)))
    thread.start()
    deadline = time.monotonic() + 10
    block = replica_fetch(follower, 0, last_epoch=NO_EPOCH)
    while not block.messages and time.monotonic() < deadline:
        block = replica_fetch(follower, 0, last_epoch=NO_EPOCH)
    assert block.messages and not answers  # appended, fetched, not yet acknowledged
    replica_fetch(follower, len(block.messages))
    thread.join(timeout=10)
    assert answers and answers[0].error == 0 and answers[0].next_offset == len(block.messages)


def test_acks_all_below_min_insync_writes_nothing(tmp_path: Path) -> None:
    """With the ISR at the leader alone and min.insync.replicas 2, acks=all is NotEnoughReplicas and the log is unchanged."""
    with running_broker(tmp_path / "data", min_insync_replicas=2) as b:
        b.broker.replicas.apply_roles(0, 1, [make_role(isr=(ME,))], [rq.BrokerInfo(FOLLOWER, "127.0.0.1", 1, 0)])
        raw = RawClient(b.host, b.port)
        ack = produce(raw, [b"refused"], rq.Acks.ALL)
        assert ack.error == ErrorCode.NOT_ENOUGH_REPLICAS and ack.first_offset == -1
        assert b.broker.logs.get("rep", 0).end_offset == 0
        assert produce(raw, [b"taken"]).error == 0  # acks=append is the leader's alone


def test_stale_newer_and_unknown_fetchers_are_refused(leader: RunningBroker) -> None:
    """An older epoch is fenced, a newer one unknown, and a broker that is not a replica is refused."""
    raw = RawClient(leader.host, leader.port)
    assert replica_fetch(raw, 0, current=EPOCH - 1).error == ErrorCode.FENCED_LEADER_EPOCH
    assert replica_fetch(raw, 0, current=EPOCH + 1).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert replica_fetch(raw, 0, replica=9).error == ErrorCode.INVALID_REQUEST


def test_diverged_follower_is_told_where_its_epoch_ends(leader: RunningBroker) -> None:
    """A follower claiming epoch 0 data the leader never had gets the divergence point and no bytes."""
    raw = RawClient(leader.host, leader.port)
    produce(raw, [b"z"])
    block = replica_fetch(raw, 500, last_epoch=0)
    assert (block.error, block.diverging_epoch, block.diverging_end_offset) == (0, 0, 0)
    assert len(block.messages) == 0


def test_long_poll_is_woken_by_an_append(leader: RunningBroker) -> None:
    """A follower's fetch at the leader's end waits, and an append answers it at once with the new bytes."""
    follower, producer = RawClient(leader.host, leader.port), RawClient(leader.host, leader.port)
    got: list[ReplicaFetchBlock] = []
    thread = threading.Thread(target=lambda: got.append(replica_fetch(follower, 0, last_epoch=NO_EPOCH,
                                                                       wait_ms=20_000)))
    began = time.monotonic()
    thread.start()
    time.sleep(0.2)
    produce(producer, [b"wake"])
    thread.join(timeout=10)
    assert got and bytes(got[0].messages) == encode_message_set([b"wake"])
    assert time.monotonic() - began < 10


def test_a_follower_refuses_produces_and_consumer_reads(leader: RunningBroker) -> None:
    """After the controller makes another broker leader, this one answers NotLeaderForPartition and writes nothing."""
    leader.broker.replicas.apply_roles(0, 2, [make_role(leader=FOLLOWER, epoch=EPOCH + 1)], [])
    raw = RawClient(leader.host, leader.port)
    assert produce(raw, [b"no"]).error == ErrorCode.NOT_LEADER_FOR_PARTITION
    assert rq.decode_fetch_response(raw.request(rq.encode_fetch("rep", 0, 0, 1024)))[0] == (
        ErrorCode.NOT_LEADER_FOR_PARTITION)
    assert leader.broker.logs.get("rep", 0).end_offset == 0


def test_older_controller_decision_is_ignored(leader: RunningBroker) -> None:
    """A role with a lower leader epoch than the one applied is refused and changes nothing."""
    codes = leader.broker.replicas.apply_roles(0, 1, [make_role(leader=FOLLOWER, epoch=EPOCH - 1)], [])
    assert codes == {("rep", 0): int(ErrorCode.FENCED_LEADER_EPOCH)}
    assert produce(RawClient(leader.host, leader.port), [b"still leader"]).error == 0


def test_acks_all_waiting_across_a_new_epoch_of_the_same_leader_is_answered(leader: RunningBroker) -> None:
    """The controller bumping the epoch while this broker stays leader (an ISR change) keeps acks=all waits alive."""
    producer, follower = RawClient(leader.host, leader.port), RawClient(leader.host, leader.port)
    answers: list[rq.PartitionAck] = []
    thread = threading.Thread(target=lambda: answers.append(produce(producer, [b"y" * 40], rq.Acks.ALL)))
    thread.start()
    deadline = time.monotonic() + 10
    while leader.broker.logs.get("rep", 0).end_offset == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert leader.broker.replicas.apply_roles(0, 2, [make_role(epoch=EPOCH + 1)], []) == {("rep", 0): 0}
    end = leader.broker.logs.get("rep", 0).end_offset
    replica_fetch(follower, end, current=EPOCH + 1)
    thread.join(timeout=10)
    assert answers and answers[0].error == 0 and answers[0].next_offset == end


def test_topic_min_insync_overrides_the_brokers(leader: RunningBroker) -> None:
    """A topic's min.insync.replicas (from the controller) applies over the broker's default of 1."""
    leader.broker.replicas.apply_roles(0, 2, [make_role(epoch=EPOCH + 1, isr=(ME,), min_insync=2)], [])
    ack = produce(RawClient(leader.host, leader.port), [b"refused"], rq.Acks.ALL)
    assert ack.error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert leader.broker.logs.get("rep", 0).end_offset == 0


def test_a_broker_stopping_follows_no_leader(leader: RunningBroker) -> None:
    """Once its controlled shutdown began, a broker made a follower starts no fetcher (it must not rejoin the ISR)."""
    leader.broker.replicas.stop_following()
    leader.broker.replicas.apply_roles(0, 2, [make_role(leader=FOLLOWER, epoch=EPOCH + 1)], [])
    assert leader.broker.fetchers.describe() == []


def test_a_07_produce_to_a_follower_is_dropped_not_written(leader: RunningBroker) -> None:
    """Kafka 0.7's PRODUCE has no response: sent to a broker that does not lead the partition it writes nothing."""
    leader.broker.replicas.apply_roles(0, 2, [make_role(leader=FOLLOWER, epoch=EPOCH + 1)], [])
    raw = RawClient(leader.host, leader.port)
    raw.send(rq.encode_produce("rep", 0, encode_message_set([b"dropped"])))
    assert rq.decode_offsets_response(raw.request(rq.encode_offsets("plain", 0, rq.LATEST_TIME, 1)))[0] == 0
    assert leader.broker.logs.get("rep", 0).end_offset == 0

"""Replicated topics' ZooKeeper values: Kafka's bytes, round trips, and strict decoding of hostile data."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.client.errors import InvalidTopic
from rill.client.zookeeper.registry import encode_partition_map, parse_partition_map
from rill.client.zookeeper.replica_layout import (MAX_PARTITIONS, ControllerInfo, PartitionState, TopicReplicas,
                                                  decode_controller_epoch, encode_controller_epoch,
                                                  is_replicated_topic_value, partition_path, partitions_path,
                                                  state_path, topic_path)

KAFKA_STATE = b'{"controller_epoch":7,"leader":1,"version":1,"leader_epoch":3,"isr":[1,3,2]}'
KAFKA_CONTROLLER = b'{"version":1,"brokerid":1,"timestamp":"1700000000000"}'

ids = st.integers(min_value=0, max_value=2**31 - 1)
epochs = st.integers(min_value=0, max_value=2**31 - 1)


@st.composite
def topic_replicas(draw: st.DrawFn) -> TopicReplicas:
    factor = draw(st.integers(min_value=1, max_value=5))
    lists = draw(st.lists(st.lists(ids, min_size=factor, max_size=factor, unique=True).map(tuple),
                          min_size=1, max_size=30))
    config = draw(st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=4))
    return TopicReplicas(tuple(lists), config)


@st.composite
def partition_states(draw: st.DrawFn) -> PartitionState:
    isr = tuple(draw(st.lists(ids, max_size=6, unique=True)))
    leader = draw(st.sampled_from(isr)) if isr and draw(st.booleans()) else -1
    return PartitionState(leader, draw(epochs), isr, draw(epochs))


def test_state_is_kafkas_bytes_key_for_key() -> None:
    """A state encodes to exactly the bytes of Kafka's example (notes section 4) and decodes back."""
    state = PartitionState(leader=1, leader_epoch=3, isr=(1, 3, 2), controller_epoch=7)
    assert state.encode() == KAFKA_STATE
    assert PartitionState.decode(KAFKA_STATE) == state
    reordered = b'{"isr":[1,3,2],"version":1,"leader":1,"controller_epoch":7,"leader_epoch":3}'
    assert PartitionState.decode(reordered) == state


def test_controller_and_epoch_are_kafkas_bytes() -> None:
    """The controller node and the epoch node hold Kafka's example values."""
    assert ControllerInfo(1, 1700000000000).encode() == KAFKA_CONTROLLER
    assert ControllerInfo.decode(KAFKA_CONTROLLER) == ControllerInfo(broker_id=1, timestamp_ms=1700000000000)
    assert encode_controller_epoch(7) == b"7"
    assert decode_controller_epoch(b"7") == 7


def test_topic_value_with_and_without_config() -> None:
    """A topic's value is version 2 with the replica lists, and the config only when there is one."""
    bare = TopicReplicas(((1, 2, 3), (2, 3, 1)))
    assert bare.encode() == b'{"version":2,"replicas":[[1,2,3],[2,3,1]]}'
    configured = TopicReplicas(((1, 2),), {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
    assert configured.encode() == (b'{"version":2,"replicas":[[1,2]],"config":{"min.insync.replicas":"2",'
                                   b'"unclean.leader.election.enable":"false"}}')
    assert (bare.partitions, bare.replication_factor) == (2, 3)
    assert TopicReplicas.decode(configured.encode()) == configured


def test_topic_value_is_immutable_and_hashable() -> None:
    """The config cannot be changed through the value, and equal values hash equal."""
    source = {"min.insync.replicas": "2"}
    value = TopicReplicas([[1, 2]], source)  # type: ignore[arg-type]
    source["min.insync.replicas"] = "1"
    assert value.config["min.insync.replicas"] == "2"
    with pytest.raises(TypeError):
        value.config["x"] = "y"  # type: ignore[index]
    assert value.replicas == ((1, 2),)
    assert hash(value) == hash(TopicReplicas(((1, 2),), {"min.insync.replicas": "2"}))


@given(topic_replicas())
def test_topic_round_trip(value: TopicReplicas) -> None:
    """Any valid topic value decodes from its encoding to an equal value."""
    assert TopicReplicas.decode(value.encode()) == value
    assert is_replicated_topic_value(value.encode())


@given(partition_states())
def test_state_round_trip(value: PartitionState) -> None:
    """Any valid state decodes from its encoding to an equal value."""
    assert PartitionState.decode(value.encode()) == value


@given(ids, st.integers(min_value=0, max_value=2**63 - 1), epochs)
def test_controller_round_trip(broker_id: int, timestamp_ms: int, epoch: int) -> None:
    """Controller values and epochs decode from their encodings."""
    info = ControllerInfo(broker_id, timestamp_ms)
    assert ControllerInfo.decode(info.encode()) == info
    assert decode_controller_epoch(encode_controller_epoch(epoch)) == epoch


def test_leaderless_states_follow_kafka() -> None:
    """Leader -1 may keep its last ISR member (or none); a leader outside the ISR is refused."""
    leaderless = b'{"controller_epoch":2,"leader":-1,"version":1,"leader_epoch":4,"isr":[3]}'
    assert PartitionState.decode(leaderless).isr == (3,)
    assert PartitionState(-1, 0, (), 0).leader == -1
    with pytest.raises(ValueError, match="not in the ISR"):
        PartitionState(2, 0, (1, 3), 0)
    with pytest.raises(ValueError, match="not in the ISR"):
        PartitionState(1, 0, (), 0)


def state_with(**fields: Any) -> bytes:
    value: dict[str, Any] = {"controller_epoch": 7, "leader": 1, "version": 1, "leader_epoch": 3, "isr": [1, 3, 2]}
    value.update(fields)
    return json.dumps(value).encode()


def topic_with(**fields: Any) -> bytes:
    value: dict[str, Any] = {"version": 2, "replicas": [[1, 2, 3], [2, 3, 1]]}
    value.update(fields)
    return json.dumps(value).encode()


HOSTILE: list[tuple[Callable[[bytes], object], bytes, str]] = [
    (PartitionState.decode, b"", "not valid JSON"),
    (PartitionState.decode, b"\xff\xfe\x00garbage", "not valid JSON"),
    (PartitionState.decode, b"[" * 100_000, "not valid JSON"),
    (PartitionState.decode, b"[1, 2]", "expected a JSON object"),
    (PartitionState.decode, b'{"leader":1,"leader":2}', "appears twice"),
    (PartitionState.decode, state_with(leader=True), "leader must be an integer"),
    (PartitionState.decode, state_with(leader="1"), "leader must be an integer"),
    (PartitionState.decode, state_with(leader=1.0), "leader must be an integer"),
    (PartitionState.decode, state_with(leader=-2), "leader must be an integer"),
    (PartitionState.decode, state_with(leader_epoch=-1), "leader_epoch must be"),
    (PartitionState.decode, state_with(controller_epoch=2**31), "controller_epoch must be"),
    (PartitionState.decode, b'{"controller_epoch":NaN,"leader":1,"version":1,"leader_epoch":3,"isr":[1]}',
     "NaN is not a number"),
    (PartitionState.decode, b'{"controller_epoch":7,"leader":1,"version":1,"leader_epoch":1e400,"isr":[1]}',
     "leader_epoch must be"),
    (PartitionState.decode, state_with(isr=[1, 3, 1]), "lists a broker twice"),
    (PartitionState.decode, state_with(isr=[1, -3]), "isr broker id"),
    (PartitionState.decode, state_with(isr={"1": 1}), "isr must be a list"),
    (PartitionState.decode, state_with(isr=[3, 2]), "not in the ISR"),
    (PartitionState.decode, state_with(version=2), "version 2 is not 1"),
    (PartitionState.decode, state_with(extra=1), "unknown fields ['extra']"),
    (PartitionState.decode, b'{"leader":1,"version":1,"leader_epoch":3,"isr":[1]}',
     "missing fields ['controller_epoch']"),
    (TopicReplicas.decode, b'{"partitions":[[1,0]]}', "missing fields"),
    (TopicReplicas.decode, topic_with(version="2"), "version '2' is not 2"),
    (TopicReplicas.decode, topic_with(replicas=[]), "0 partitions"),
    (TopicReplicas.decode, topic_with(replicas=[[1]] * (MAX_PARTITIONS + 1)), "10001 partitions"),
    (TopicReplicas.decode, topic_with(replicas=[[]]), "no replicas"),
    (TopicReplicas.decode, topic_with(replicas=[[1, 2], [2, 2]]), "lists a broker twice"),
    (TopicReplicas.decode, topic_with(replicas=[[1, 2], [2, 3, 1]]), "same replication factor"),
    (TopicReplicas.decode, topic_with(replicas=[[1, -2]]), "broker id must be"),
    (TopicReplicas.decode, topic_with(replicas=[[1, 2**31]]), "broker id must be"),
    (TopicReplicas.decode, topic_with(replicas="1,2"), "replicas must be a list"),
    (TopicReplicas.decode, topic_with(replicas=[3]), "must be a list of broker ids"),
    (TopicReplicas.decode, topic_with(config={"min.insync.replicas": 2}), "is not a string to a string"),
    (TopicReplicas.decode, topic_with(config=["min.insync.replicas"]), "config must be an object"),
    (ControllerInfo.decode, b'{"version":1,"brokerid":1,"timestamp":1700000000000}', "timestamp must be a string"),
    (ControllerInfo.decode, b'{"version":1,"brokerid":1,"timestamp":"-1"}', "timestamp must be a string"),
    (ControllerInfo.decode, b'{"version":1,"brokerid":-1,"timestamp":"1"}', "brokerid must be"),
    (ControllerInfo.decode, b'{"version":1,"brokerid":1}', "missing fields ['timestamp']"),
    (decode_controller_epoch, b"", "controller epoch"),
    (decode_controller_epoch, b"-1", "controller epoch"),
    (decode_controller_epoch, b"7\n", "controller epoch"),
    (decode_controller_epoch, b"2147483648", "controller epoch"),
    (decode_controller_epoch, "\u0667".encode(), "controller epoch"),
]


@pytest.mark.parametrize(("decode", "data", "message"), HOSTILE, ids=[repr(d[:40]) for _, d, _ in HOSTILE])
def test_hostile_values_raise_value_error(decode: Callable[[bytes], object], data: bytes, message: str) -> None:
    """Each malformed value is refused with a ValueError that says what is wrong."""
    with pytest.raises(ValueError) as caught:
        decode(data)
    assert message in str(caught.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["version", "replicas", "config", "leader", "leader_epoch", "isr", "controller_epoch",
                         "brokerid", "timestamp", "x"]), children, max_size=6),
    max_leaves=20)


@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_decoders_raise_only_value_error(data: bytes) -> None:
    """On arbitrary bytes and arbitrary JSON every decoder either decodes or raises ValueError."""
    for decode in (TopicReplicas.decode, PartitionState.decode, ControllerInfo.decode, decode_controller_epoch):
        try:
            decode(data)
        except ValueError:
            pass
    assert isinstance(is_replicated_topic_value(data), bool)


def test_kinds_of_topic_value_are_told_apart() -> None:
    """A replicated value (even a malformed one) is told from a 0.7 map, which the 0.7 parser still refuses cleanly."""
    replicated = TopicReplicas(((1, 2),)).encode()
    assert is_replicated_topic_value(replicated)
    assert is_replicated_topic_value(b'{"version":3,"replicas":"?"}')
    assert not is_replicated_topic_value(encode_partition_map([(1, 0), (2, 0)]))
    assert not is_replicated_topic_value(b"not json")
    assert not is_replicated_topic_value(b"[1]")
    with pytest.raises(ValueError):
        parse_partition_map(replicated)


def test_hostile_partition_maps_raise_value_error_only() -> None:
    """A huge number or a deeply nested 0.7 map is refused with ValueError (it had raised Overflow/RecursionError)."""
    for hostile in (b'{"partitions": [[1e999, 0]]}', b'{"partitions": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"):
        with pytest.raises(ValueError, match="not a partition map"):
            parse_partition_map(hostile)


def test_paths_and_their_refusals() -> None:
    """Paths follow the layout; a name or number that could address another node is refused."""
    assert topic_path("orders") == "/rill/topics/orders"
    assert partitions_path("orders") == "/rill/topics/orders/partitions"
    assert partition_path("orders", 3) == "/rill/topics/orders/partitions/3"
    assert state_path("orders", 3) == "/rill/topics/orders/partitions/3/state"
    for bad in ("a/b", "..", "", "x" * 250):
        with pytest.raises(InvalidTopic):
            topic_path(bad)
    for partition in (-1, MAX_PARTITIONS, True):
        with pytest.raises(ValueError):
            state_path("orders", partition)


def test_constructors_keep_the_invariants() -> None:
    """Values built in code are checked like decoded ones."""
    with pytest.raises(ValueError, match="0 partitions"):
        TopicReplicas(())
    with pytest.raises(ValueError, match="same replication factor"):
        TopicReplicas(((1, 2), (1,)))
    with pytest.raises(ValueError, match="brokerid must be"):
        ControllerInfo(-1, 0)
    with pytest.raises(ValueError, match="controller epoch must be"):
        encode_controller_epoch(2**31)

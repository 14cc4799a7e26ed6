"""The ZooKeeper consumer against a real ZooKeeper and real brokers: layout, values, assignment, offsets."""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from pathlib import Path

import pytest
import structlog
from kazoo.client import KazooClient

from rill.client.client_config import ConfigError
from rill.client.zookeeper import PartitionKey, Whitelist, ZkConsumer, ZkConsumerError, ZkRecord
from tests.zookeeper.test_broker_registration import wait_for
from tests.zookeeper.zk_consumer_support import FAST, owners, produce, values, zk_brokers

SEED_004_IDS = ["59a1bce1-2b1d-11e1-9aff-040ccee02800", "95eb94bd-2b1d-11e1-8e73-040ccee02800",
                "bb451045-2b1d-11e1-b742-040ccee02800"]


def test_seed_004_example_assignment(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Three consumers over brokers 0 and 1 (three partitions each) own [0-0,0-1], [0-2,1-0], [1-1,1-2], as seed 004 shows."""
    with zk_brokers(tmp_path, zk_connect, {"t": 3}, zk=zk), ExitStack() as stack:
        consumers = [stack.enter_context(ZkConsumer(zookeeper=zk_connect, group="g", consumerid=c, **FAST))
                     for c in SEED_004_IDS]
        for consumer in consumers:
            consumer.subscribe(["t"])
        expected = {"0-0": 0, "0-1": 0, "0-2": 1, "1-0": 1, "1-1": 2, "1-2": 2}
        want = {part: f"g_{SEED_004_IDS[i]}-0" for part, i in expected.items()}
        wait_for(lambda: owners(zk, "g", "t") == want, what="seed 004's owners")
        for i, consumer in enumerate(consumers):
            mine = {k.name for k in consumer.assignment()}
            wait_for(lambda: {k.name for k in consumer.assignment()} == {p for p, c in expected.items() if c == i},
                     what=f"consumer {i} delivering its share (has {mine})")


def test_zookeeper_layout_and_values(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """ids value is 0.7's JSON, owners hold thread ids, offsets are decimal byte offsets, parents hold the creator id."""
    with zk_brokers(tmp_path, zk_connect, {"t": 2}, ids=(0,), zk=zk) as brokers:
        sent = produce(brokers, "t", 2, 3)
        with ZkConsumer(zookeeper=zk_connect, group="g", **{**FAST, "autocommit_enable": False}) as consumer:
            consumer.create_message_streams({"t": 2})
            me = consumer.consumer_id
            assert me.startswith("g_") and len(me.rsplit("-", 2)) == 3
            value, stat = zk.get(f"/consumers/g/ids/{me}")
            assert value == b'{ "t": 2 }' and stat.ephemeralOwner == consumer.zk.client_id[0]
            assert json.loads(value) == {"t": 2}
            wait_for(lambda: owners(zk, "g", "t") == {"0-0": f"{me}-0", "0-1": f"{me}-1"}, what="owners")
            assert zk.get("/consumers/g/owners/t/0-0")[1].ephemeralOwner == consumer.zk.client_id[0]
            for path in ("/consumers", "/consumers/g", "/consumers/g/ids", "/consumers/g/owners/t"):
                data, stat = zk.get(path)
                assert data == me.encode() and stat.ephemeralOwner == 0, path
            got: list[ZkRecord] = []
            wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) == len(sent), what="all records")
            assert set(values(got)) == sent
            assert zk.exists("/consumers/g/offsets/t/0-0") is None  # nothing committed yet
            consumer.commit()
            for p in range(2):
                last = max((r for r in got if r.partition == p), key=lambda r: r.offset)
                data, stat = zk.get(f"/consumers/g/offsets/t/0-{p}")
                assert data == str(last.next_offset).encode() and stat.ephemeralOwner == 0
        assert zk.get_children("/consumers/g/ids") == []
        assert zk.get_children("/consumers/g/owners/t") == []


def test_offsets_survive_consumer_restarts(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """A new consumer of the group continues exactly where the closed one committed (auto commit at close)."""
    with zk_brokers(tmp_path, zk_connect, {"t": 2}, zk=zk) as brokers:
        first = produce(brokers, "t", 2, 5, tag="a")
        with ZkConsumer(zookeeper=zk_connect, group="g", **FAST) as consumer:
            consumer.subscribe(["t"])
            got: list[ZkRecord] = []
            wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) == len(first), what="first batch")
        committed = {name: int(zk.get(f"/consumers/g/offsets/t/{name}")[0]) for name in ("0-0", "0-1", "1-0", "1-1")}
        for r in got:
            assert r.next_offset <= committed[f"{r.broker_id}-{r.partition}"]
        second = produce(brokers, "t", 2, 4, tag="b")
        with ZkConsumer(zookeeper=zk_connect, group="g", **{**FAST, "autooffset_reset": "largest"}) as again:
            again.subscribe({"t": 1})
            more: list[ZkRecord] = []
            wait_for(lambda: more.extend(again.poll(0.1)) or len(more) >= len(second), what="second batch")
            again.poll(0.3)
            assert set(values(more)) == second  # nothing of the first batch again, nothing of the second lost
            for name, offset in committed.items():
                assert min(r.offset for r in more if f"{r.broker_id}-{r.partition}" == name) == offset


def test_streams_carry_their_thread_ids_partitions(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """create_message_streams({"t": 2}): stream i yields exactly the partitions owned by <consumer id>-i, and ends after consumer.timeout.ms."""
    with zk_brokers(tmp_path, zk_connect, {"t": 2}, zk=zk) as brokers:
        sent = produce(brokers, "t", 2, 3)
        with ZkConsumer(zookeeper=zk_connect, group="g", consumer_timeout_ms=400, **FAST) as consumer:
            streams = consumer.create_message_streams({"t": 2})["t"]
            by_thread = consumer.thread_assignment()
            results: list[list[ZkRecord]] = [[], []]

            def read(i: int) -> None:
                results[i].extend(streams[i])  # ends after 400 ms without a record

            threads = [threading.Thread(target=read, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert set(values(results[0] + results[1])) == sent
            for i in range(2):
                owned = set(by_thread[f"{consumer.consumer_id}-{i}"])
                assert {PartitionKey(r.topic, r.broker_id, r.partition) for r in results[i]} == owned
                assert len(owned) == 2


def test_api_misuse_is_refused(zk_connect: str) -> None:
    """Missing settings, a second subscription, poll before subscribing, a bad regex: clear errors."""
    with pytest.raises(ConfigError, match="groupid"):
        ZkConsumer(zookeeper=zk_connect)
    with pytest.raises(ConfigError, match="autooffset.reset"):
        ZkConsumer(zookeeper=zk_connect, group="g", autooffset_reset="earliest")
    with ZkConsumer(zookeeper=zk_connect, group="g", **FAST) as consumer:
        with pytest.raises(ZkConsumerError, match="subscribe"):
            consumer.poll(0)
        with pytest.raises(Exception, match="unterminated|missing"):
            consumer.create_message_streams_by_filter(Whitelist("(a"))
        consumer.subscribe(["t"])
        assert consumer.poll(0.05) == [] and consumer.assignment() == set()
        with pytest.raises(ZkConsumerError, match="already subscribed"):
            consumer.subscribe(["u"])


def test_a_consumerid_in_use_is_an_error(zk_connect: str, zk: KazooClient) -> None:
    """A second consumer given a live consumer's consumerid logs an error and never takes its registration over."""
    with ZkConsumer(zookeeper=zk_connect, group="g", consumerid="same", **FAST) as first:
        first.subscribe(["t"])
        held = zk.get("/consumers/g/ids/g_same")[1]
        with structlog.testing.capture_logs() as logs, \
                ZkConsumer(zookeeper=zk_connect, group="g", consumerid="same", **FAST) as second:
            second.subscribe(["t"])
            errors = [e for e in logs if e["event"] == "zookeeper_consumer.consumer_id_in_use"]
            assert errors and errors[0]["log_level"] == "error" and "g_same" in errors[0]["error"]
            assert zk.get("/consumers/g/ids/g_same")[1].ephemeralOwner == held.ephemeralOwner

"""ZooKeeper consumer groups in motion: members joining and leaving under load, topic filters,
session expiry, and an owner node held by a foreign session."""

from __future__ import annotations

import collections
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import structlog
from kazoo.client import KazooClient, KazooState

from rill.client.simple import SimpleProducer
from rill.client.zookeeper import ZkConsumer
from tests.zk import ZkServer
from tests.zookeeper.kafka07_reference import reference_split
from tests.zookeeper.test_broker_registration import expire_session, wait_for
from tests.zookeeper.zk_consumer_support import FAST, PollLoop, owner_nodes, owners, produce, values, zk_brokers


class OwnerMonitor:
    """Reads every owner node of a group every few ms; records each node whose holder is not who it names.

    An owner node must be an ephemeral of the session of the consumer whose thread id it
    holds (``sessions``: consumer id -> its sessions, kept current by the test).
    """

    def __init__(self, zk: KazooClient, group: str, sessions: dict[str, set[int]]) -> None:
        self.zk = zk
        self.group = group
        self.sessions = sessions
        self.samples = 0
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            for path, (value, session) in owner_nodes(self.zk, self.group).items():
                consumer = value.rsplit("-", 1)[0]
                if session not in self.sessions.get(consumer, set()):
                    self.violations.append(f"{path} = {value} held by session {session:#x}")
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def expected_owners(members: dict[str, int], parts: list[str]) -> dict[str, str]:
    """The reference model's split for members (consumer id -> streams) of one topic."""
    return reference_split(parts, [f"{m}-{i}" for m, n in members.items() for i in range(n)])


@pytest.mark.slow
def test_members_join_and_leave_under_load(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Consumers join and leave while messages flow: owners always belong to their live holder, every message is delivered exactly once, and the group ends fully owned by the range rule."""
    with zk_brokers(tmp_path, zk_connect, {"t": 4}, zk=zk) as brokers, ExitStack() as stack:
        sent: list[bytes] = []
        stop_producing = threading.Event()

        def producer() -> None:
            clients = [stack.enter_context(SimpleProducer(b.host, b.port)) for b in brokers]
            n = 0
            while not stop_producing.is_set():
                for i, client in enumerate(clients):
                    batch = [f"v{n}-{i}-{j}".encode() for j in range(5)]
                    client.send("t", batch, n % 4)
                    sent.extend(batch)
                n += 1
                time.sleep(0.01)

        sessions: dict[str, set[int]] = collections.defaultdict(set)
        monitor = OwnerMonitor(zk, "g", sessions)
        producing = threading.Thread(target=producer, daemon=True)
        producing.start()
        live: dict[str, tuple[ZkConsumer, PollLoop]] = {}
        streams_of: dict[str, int] = {}
        delivered = []

        def join(streams: int) -> None:
            consumer = ZkConsumer(zookeeper=zk_connect, group="g", **FAST)
            sessions[consumer.consumer_id].add(consumer.zk.client_id[0])
            consumer.subscribe({"t": streams})
            streams_of[consumer.consumer_id] = streams
            live[consumer.consumer_id] = (consumer, PollLoop(consumer))

        def leave(index: int) -> None:
            cid = sorted(live)[index]
            consumer, loop = live.pop(cid)
            consumer.close()  # while its poll loop still runs
            loop.stop()
            delivered.extend(loop.records)

        try:
            join(1)
            time.sleep(0.4)
            join(1)
            join(2)
            time.sleep(0.6)
            leave(0)
            join(1)
            time.sleep(0.6)
            leave(1)
            time.sleep(0.3)
            leave(0)
            join(3)
            time.sleep(0.6)
        finally:
            stop_producing.set()
            producing.join(10)
        parts = sorted(f"{b}-{p}" for b in (0, 1) for p in range(4))
        want = expected_owners({cid: streams_of[cid] for cid in live}, parts)
        wait_for(lambda: owners(zk, "g", "t") == want, what="the final owners")
        for cid, (consumer, _) in live.items():
            wait_for(lambda: {f"{k.name}" for k in consumer.assignment()} ==
                     {p for p, t in want.items() if t.startswith(cid + "-")}, what=f"{cid} delivering its share")
        wait_for(lambda: sum(len(loop.records) for _, loop in live.values()) + len(delivered) >= len(sent),
                 timeout=20, what="every message delivered")
        time.sleep(0.3)
        for cid in list(live):
            consumer, loop = live.pop(cid)
            consumer.close()
            loop.stop()
            delivered.extend(loop.records)
        monitor.stop()
        assert monitor.samples > 50 and monitor.violations == []
        counts = collections.Counter(values(delivered))
        assert set(counts) == set(sent)
        assert [v for v, n in counts.items() if n > 1] == []  # no partition was delivered by two members


def test_whitelist_and_blacklist(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """A whitelist takes the topics it matches in full, including ones created later; a blacklist the others."""
    with zk_brokers(tmp_path, zk_connect, {"a1": 2, "a2": 1, "b1": 2}, ids=(0,), zk=zk) as brokers:
        with ZkConsumer(zookeeper=zk_connect, group="gw", **FAST) as white, \
                ZkConsumer(zookeeper=zk_connect, group="gb", **FAST) as black:
            white.subscribe_pattern(whitelist="a.*", streams=2)
            black.subscribe_pattern(blacklist="a.*")
            assert zk.get(f"/consumers/gw/ids/{white.consumer_id}")[0] == b"*2*a.*"
            assert zk.get(f"/consumers/gb/ids/{black.consumer_id}")[0] == b"!1!a.*"

            def topics(consumer: ZkConsumer) -> dict[str, int]:
                return dict(collections.Counter(k.topic for k in consumer.assignment()))
            wait_for(lambda: topics(white) == {"a1": 2, "a2": 1}, what="whitelisted topics")
            wait_for(lambda: topics(black) == {"b1": 2}, what="blacklisted topics")
            brokers[0].broker.logs.create_topic("a3", 2)
            brokers[0].broker.logs.create_topic("c1", 1)
            wait_for(lambda: topics(white) == {"a1": 2, "a2": 1, "a3": 2}, what="a new whitelisted topic")
            wait_for(lambda: topics(black) == {"b1": 2, "c1": 1}, what="a new topic outside the blacklist")
            w = white.consumer_id
            assert owners(zk, "gw", "a1") == {"0-0": f"{w}-0", "0-1": f"{w}-1"}
            sent = produce(brokers, "a3", 2, 2)
            got: list = []
            wait_for(lambda: got.extend(white.poll(0.1)) or len(got) >= len(sent), what="records of a3")
            assert set(values(got)) == sent


@pytest.mark.slow
def test_session_expiry_reregisters_and_rebalances(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """An expired consumer stops delivering at once, registers again with a new session, and the group rebalances correctly."""
    with zk_brokers(tmp_path, zk_connect, {"t": 2}, zk=zk) as brokers, \
            ZkConsumer(zookeeper=zk_connect, group="g", consumerid="a", **FAST) as a, \
            ZkConsumer(zookeeper=zk_connect, group="g", consumerid="b", **FAST) as b:
        a.subscribe(["t"])
        b.subscribe(["t"])
        want = {"0-0": "g_a-0", "0-1": "g_a-0", "1-0": "g_b-0", "1-1": "g_b-0"}
        wait_for(lambda: owners(zk, "g", "t") == want, what="owners before")
        sent = produce(brokers, "t", 2, 3, tag="before")
        loops = [PollLoop(a), PollLoop(b)]
        old_session = a.zk.client_id[0]
        rebalancer = a._rebalancer
        assert rebalancer is not None
        with structlog.testing.capture_logs() as logs:
            with rebalancer.lock:  # a cannot register again or rebalance until we have looked
                expire_session(a.zk, zk_connect)
                wait_for(lambda: a.assignment() == set(), timeout=5, what="a revoking everything at the loss")
                time.sleep(0.05)
                seen = len(loops[0].records)
                sent |= produce(brokers, "t", 2, 3, tag="during")
                time.sleep(0.3)
                assert len(loops[0].records) == seen  # nothing delivered without ownership
            wait_for(lambda: a.zk.connected and a.zk.client_id[0] != old_session, what="a new session")
            wait_for(lambda: owners(zk, "g", "t") == want, timeout=15, what="owners after")
        events = [e["event"] for e in logs if e.get("consumer") == "g_a"]
        assert "zookeeper_consumer.session_lost" in events and "zookeeper_consumer.new_session" in events
        new_session = a.zk.client_id[0]
        assert zk.get("/consumers/g/ids/g_a")[1].ephemeralOwner == new_session
        nodes = owner_nodes(zk, "g")
        assert {nodes[f"t/{p}"][1] for p in ("0-0", "0-1")} == {new_session}
        sent |= produce(brokers, "t", 2, 3, tag="after")
        wait_for(lambda: set(values(loops[0].records + loops[1].records)) >= sent, what="every message")
        for loop in loops:
            loop.stop()


def test_owner_held_by_a_foreign_session(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """An owner node held by another session makes the rebalance retry with backoff, log an error when out of retries, never touch that node, and succeed once it is gone."""
    with zk_brokers(tmp_path, zk_connect, {"t": 2}, ids=(0,), zk=zk):
        intruder = KazooClient(hosts=zk_connect, timeout=10)
        intruder.start(timeout=10)
        intruder.create("/consumers/g/owners/t/0-0", b"g_other-0", ephemeral=True, makepath=True)
        held = intruder.get("/consumers/g/owners/t/0-0")[1]
        with structlog.testing.capture_logs() as logs, \
                ZkConsumer(zookeeper=zk_connect, group="g", consumerid="c", **{**FAST, "rebalance_retries_max": 2,
                                                                               "rebalance_backoff_ms": 150}) as c:
            c.subscribe(["t"])  # returns after the first round, which ran out of retries
            failed = [e for e in logs if e["event"] == "zookeeper_consumer.rebalance_failed"]
            assert failed and failed[0]["log_level"] == "error" and failed[0]["attempts"] == 2
            waits = [e for e in logs if e["event"] == "zookeeper_consumer.waiting_for_owner"]
            assert len(waits) == 2 and waits[0]["owned_by_others"] == {"t/0-0": "g_other-0"}
            assert c.assignment() == set()
            assert owners(zk, "g", "t") == {"0-0": "g_other-0"}  # 0-1 was released again, 0-0 never touched
            time.sleep(0.5)  # later rounds keep failing, and keep off the node
            stat = intruder.get("/consumers/g/owners/t/0-0")[1]
            assert (stat.ephemeralOwner, stat.mzxid) == (held.ephemeralOwner, held.mzxid)
            assert c.assignment() == set()
            intruder.stop()
            intruder.close()
            wait_for(lambda: owners(zk, "g", "t") == {"0-0": "g_c-0", "0-1": "g_c-0"}, what="the later retry")
            wait_for(lambda: len(c.assignment()) == 2, what="delivering both partitions")


def test_a_broker_leaving_and_returning(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """A broker that stops drops out of the assignment; back (at a new port) its partitions are consumed again from the committed offsets."""
    with zk_brokers(tmp_path, zk_connect, {"t": 2}, ids=(0,), zk=zk) as (b0,), \
            ZkConsumer(zookeeper=zk_connect, group="g", **FAST) as consumer:
        with zk_brokers(tmp_path, zk_connect, {"t": 2}, ids=(1,), zk=zk) as (b1,):
            consumer.subscribe(["t"])
            sent = produce([b0, b1], "t", 2, 3, tag="first")
            got: list = []
            wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) >= len(sent), what="first batch")
            old_port = b1.port
        wait_for(lambda: {k.broker_id for k in consumer.assignment()} == {0}, what="broker 1 dropped")
        assert zk.exists("/consumers/g/offsets/t/1-0") is not None  # committed before it was released
        with zk_brokers(tmp_path, zk_connect, {"t": 2}, ids=(1,), zk=zk) as (b1,):
            assert b1.port != old_port
            wait_for(lambda: len(consumer.assignment()) == 4, what="broker 1 back")
            sent |= produce([b1], "t", 2, 2, tag="second")
            wait_for(lambda: got.extend(consumer.poll(0.1)) or set(values(got)) >= sent, what="second batch")
            consumer.poll(0.3)
            assert sorted(values(got)) == sorted(sent)  # nothing of broker 1 delivered twice


@pytest.mark.slow
def test_delivery_pauses_while_zookeeper_is_unreachable(tmp_path: Path) -> None:
    """While the ZooKeeper connection is down (ownership uncertain) nothing is delivered, delivery resumes once it is back, and close() does not hang on it."""
    with ZkServer(tmp_path / "zk") as server, \
            zk_brokers(tmp_path, server.address, {"t": 1}, ids=(0,)) as (broker,), \
            ZkConsumer(zookeeper=server.address, group="g", **{**FAST, "zk_sessiontimeout_ms": 10_000}) as consumer:
        consumer.subscribe(["t"])
        wait_for(lambda: len(consumer.assignment()) == 1, what="the partition")
        sent = produce([broker], "t", 1, 3, tag="before")
        got: list = []
        wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) == 3, what="first batch")
        server.stop()
        try:
            wait_for(lambda: consumer.zk.state == KazooState.SUSPENDED, what="the connection loss")
            later = produce([broker], "t", 1, 3, tag="during")
            assert consumer.poll(0.5) == []
        finally:  # (the broker's close waits for ZooKeeper)
            server.start()
            server.wait_ready()
        # the session usually resumes; a restarted server may also expire it (then: re-register, rebalance)
        wait_for(lambda: consumer.zk.state == KazooState.CONNECTED, timeout=15, what="reconnection")
        wait_for(lambda: got.extend(consumer.poll(0.1)) or set(values(got)) == sent | later, timeout=15,
                 what="delivery resumed")
        assert set(values(got)) == sent | later
        server.stop()  # close() does not wait for an unreachable ZooKeeper
        try:
            wait_for(lambda: consumer.zk.state == KazooState.SUSPENDED, what="the connection loss")
            with structlog.testing.capture_logs() as logs:
                started = time.monotonic()
                consumer.close()
                assert time.monotonic() - started < 5
            assert "zookeeper_consumer.closed_without_zookeeper" in [e["event"] for e in logs]
        finally:
            server.start()
            server.wait_ready()

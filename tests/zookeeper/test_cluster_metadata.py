"""Several brokers on one ZooKeeper are one cluster to native clients (issue 5, "Clusters in native mode").

Each broker numbers its own partitions of a topic from 0, as Kafka 0.7 did; the topic's
partition map in ZooKeeper gives them cluster-wide numbers, which every broker's
METADATA and Admin service report, and which the Producer and Consumer use unchanged.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from rill.broker.testing import RunningBroker
from rill.client.consumer import Consumer
from rill.client.producer import Producer
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from tests.zookeeper.test_broker_registration import wait_for, zk_broker


def metadata(b: RunningBroker, topic: str) -> rq.TopicMetadata:
    with SimpleConsumer(b.host, b.port, timeout=5) as c:
        return c.metadata([topic]).topics[0]


def two_broker_topic(stack: ExitStack, tmp_path: Path, zk_connect: str) -> tuple[RunningBroker, RunningBroker]:
    """Brokers 1 and 2; topic "t" with 2 partitions on broker 1 (created first) and 3 on broker 2."""
    # the groups topic (factor 2) is created once both are up, so each leads some of its partitions
    b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1, offsets_topic_replication_factor=2))
    b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2, offsets_topic_replication_factor=2))
    for b in (b1, b2):
        placement = b.broker.coordination.placement
        assert placement is not None
        wait_for(placement.serving_all, what=f"broker {b.broker_id} serving the groups it leads")
    b1.broker.logs.create_topic("t", 2)
    wait_for(lambda: metadata(b2, "t").partitions == 2, what="broker 1's partitions in the map")
    b2.broker.logs.create_topic("t", 3)
    for b in (b1, b2):
        wait_for(lambda b=b: metadata(b, "t").partitions == 5, what=f"five partitions at broker {b.broker_id}")  # type: ignore[misc]
    return b1, b2


def test_every_broker_reports_the_same_cluster_wide_partitions(tmp_path: Path, zk_connect: str,
                                                              zk: KazooClient) -> None:
    with ExitStack() as stack:
        b1, b2 = two_broker_topic(stack, tmp_path, zk_connect)
        for b in (b1, b2):
            t = metadata(b, "t")
            assert t.leaders == (1, 1, 2, 2, 2)
            assert t.broker_partitions == (0, 1, 0, 1, 2)
            with SimpleConsumer(b.host, b.port, timeout=5) as c:
                assert sorted(x.broker_id for x in c.metadata(["t"]).brokers) == [1, 2]
        value, _ = zk.get("/rill/topics/t")
        assert json.loads(value) == {"partitions": [[1, 0], [1, 1], [2, 0], [2, 1], [2, 2]]}
        # the 0.7 registry is untouched: each broker lists its own count
        assert zk.get("/brokers/topics/t/1")[0] == b"2" and zk.get("/brokers/topics/t/2")[0] == b"3"

        with grpc.insecure_channel(b1.grpc_address) as channel:
            admin = apb_grpc.AdminStub(channel)
            cluster = admin.DescribeCluster(apb.DescribeClusterRequest(), timeout=10)
            assert [b.broker_id for b in cluster.brokers] == [1, 2]
            assert {b.broker_id: b.grpc_port for b in cluster.brokers} == {1: b1.grpc_port, 2: b2.grpc_port}
            desc = admin.DescribeTopics(apb.DescribeTopicsRequest(topics=["t"]), timeout=10).topics[0]
            assert desc.partition_count == 5
            assert [(p.leader, p.broker_partition) for p in desc.partitions] == [(1, 0), (1, 1), (2, 0), (2, 1),
                                                                                 (2, 2)]
            assert all(p.end_offset == 0 and p.start_offset == 0 for p in desc.partitions)  # remote ones asked too


def test_producer_and_consumer_work_across_the_cluster(tmp_path: Path, zk_connect: str) -> None:
    with ExitStack() as stack:
        b1, b2 = two_broker_topic(stack, tmp_path, zk_connect)
        sent: dict[int, list[bytes]] = {p: [] for p in range(5)}
        with Producer(bootstrap_servers=f"{b2.host}:{b2.port}", linger_ms=1) as producer:
            responses = []
            for i in range(50):
                value = f"m{i}".encode()
                responses.append((i % 5, value, producer.send("t", value, partition=i % 5)))
            for p, value, response in responses:
                assert response.get_error(timeout=10) is None
                sent[p].append(value)
        # each cluster-wide partition landed in its own broker's partition
        placement = {0: (b1, 0), 1: (b1, 1), 2: (b2, 0), 3: (b2, 1), 4: (b2, 2)}
        for p, (b, number) in placement.items():
            with SimpleConsumer(b.host, b.port, timeout=5) as c:
                assert [m.value for m in c.fetch("t", number, 0)] == sent[p]

        consumer = Consumer(bootstrap_servers=f"{b1.host}:{b1.port}", group_id="across",
                            auto_offset_reset="earliest")
        got: dict[int, list[bytes]] = {p: [] for p in range(5)}
        try:
            consumer.subscribe(["t"])
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < 50 and time.monotonic() < deadline:
                for m in consumer.poll(0.2):
                    got[m.partition].append(m.value)
        finally:
            consumer.close()
        assert got == sent


def test_a_dead_brokers_partitions_have_no_leader_and_unkeyed_sends_avoid_them(tmp_path: Path,
                                                                                zk_connect: str) -> None:
    with ExitStack() as stack:
        b1, b2 = two_broker_topic(stack, tmp_path, zk_connect)
        b2.close()
        wait_for(lambda: metadata(b1, "t").leaders == (1, 1, rq.NO_LEADER, rq.NO_LEADER, rq.NO_LEADER),
                 what="broker 2's partitions leaderless")
        assert metadata(b1, "t").partitions == 5  # numbers stay while the broker is away
        with Producer(bootstrap_servers=f"{b1.host}:{b1.port}", linger_ms=1) as producer:
            responses = [producer.send("t", f"u{i}".encode()) for i in range(20)]
            for r in responses:
                assert r.get_error(timeout=10) is None
                assert r.partition in (0, 1)


def test_rill_consume_reads_a_topic_across_the_cluster(tmp_path: Path, zk_connect: str,
                                                       capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from structlog.testing import capture_logs

    from rill.client.cli.main import main
    from rill.client.simple import SimpleProducer

    with ExitStack() as stack:
        b1, b2 = two_broker_topic(stack, tmp_path, zk_connect)
        for b, number, value in ((b1, 1, b"on-1-1"), (b2, 2, b"on-2-2")):
            with SimpleProducer(b.host, b.port) as p:
                p.send("t", [value], number)
        with capture_logs():
            assert main(["consume", "-t", "t", "--format", "%p %s\\n", "-q", "--broker", b1.address,
                         "--timeout", "10"]) == 0
        # broker 1's partition 1 is partition 1; broker 2's partition 2 is partition 4 of the cluster
        assert sorted(capsysbinary.readouterr().out.splitlines()) == [b"1 on-1-1", b"4 on-2-2"]


def test_describe_cluster_names_each_groups_coordinator_from_any_broker(tmp_path: Path, zk_connect: str) -> None:
    from rill.v1 import coordinator_pb2 as pb
    from rill.v1 import coordinator_pb2_grpc as pb_grpc

    with ExitStack() as stack:
        b1, b2 = two_broker_topic(stack, tmp_path, zk_connect)
        groups = [f"g{i}" for i in range(6)]
        with grpc.insecure_channel(b1.grpc_address) as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            for g in groups:  # CreateGroup may go to any broker: it is forwarded to the coordinator
                assert stub.CreateGroup(pb.CreateGroupRequest(consumer_group=g, topics=["t"]), timeout=10).error_code \
                    == pb.NONE
        placement = b1.broker.coordination.placement
        assert placement is not None
        # a group's coordinator leads its partition of __rill_groups (5 partitions over 2 brokers here)
        expected = {g: placement.coordinator(g).broker_id for g in groups}  # type: ignore[union-attr]
        assert set(expected.values()) == {1, 2}  # both brokers coordinate some of them
        for b in (b1, b2):
            with grpc.insecure_channel(b.grpc_address) as channel:
                wait_for(lambda: {c.consumer_group: c.coordinator_broker_id for c in apb_grpc.AdminStub(channel)
                                  .DescribeCluster(apb.DescribeClusterRequest(), timeout=10).coordinators
                                  if c.consumer_group in expected} == expected,
                         what=f"broker {b.broker_id} names every coordinator")


def test_rill_produce_spreads_over_the_cluster_and_consume_skips_a_dead_broker(
        tmp_path: Path, zk_connect: str, monkeypatch: pytest.MonkeyPatch,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    import io
    import sys

    from structlog.testing import capture_logs

    from rill.client.cli.main import main

    def rill(b: RunningBroker, *argv: str) -> int:
        with capture_logs():
            return main([*argv, "--broker", b.address, "--timeout", "10"])

    with ExitStack() as stack:
        b1, b2 = two_broker_topic(stack, tmp_path, zk_connect)
        lines = b"".join(f"line{i}\n".encode() for i in range(10))
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines)))
        assert rill(b1, "produce", "-t", "t", "--batch-size", "1") == 0
        summary = capsysbinary.readouterr().err
        assert all(f"t-{p}: 2" in summary.decode() for p in range(5)), summary  # round robin over all five
        # partition 4 is broker 2's partition 2: --partition takes the cluster-wide number
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"four\n")))
        assert rill(b1, "produce", "-t", "t", "-p", "4") == 0
        with SimpleConsumer(b2.host, b2.port, timeout=5) as c:
            assert [m.value for m in c.fetch("t", 2, 0)][-1] == b"four"
        capsysbinary.readouterr()

        b2.close()
        wait_for(lambda: metadata(b1, "t").leaders[2:] == (rq.NO_LEADER,) * 3, what="broker 2 gone")
        assert rill(b1, "consume", "-t", "t", "--format", "%p %s\\n") == 0
        out = capsysbinary.readouterr()
        printed = [line.decode().split() for line in out.out.splitlines()]  # "partition lineN"
        assert sorted(int(p) for p, _ in printed) == [0, 0, 1, 1]  # the live partitions' two lines each
        assert len({(int(p) - int(line[4:])) % 5 for p, line in printed}) == 1  # round robin from a random start
        assert b"skipping 3 partition(s) whose broker is not alive: t-2, t-3, t-4" in out.err

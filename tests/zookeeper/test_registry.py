"""The registry view reads /brokers as brokers write it and follows every change."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.client.zookeeper.registry import (ClusterSnapshot, RegistryView, parse_broker, parse_partition_name,
                                            partition_name)
from tests.zookeeper.test_broker_registration import wait_for, zk_broker


def test_parse_broker_value_as_seed_004_says() -> None:
    reg = parse_broker(2, b"10.0.0.12-1324306324402:10.0.0.12:9092")
    assert (reg.broker_id, reg.creator, reg.host, reg.port) == (2, "10.0.0.12-1324306324402", "10.0.0.12", 9092)
    assert parse_broker(1, b"h-1:::1:9092").host == "::1"
    with pytest.raises(ValueError):
        parse_broker(1, b"no-port-here")


def test_partition_names_sort_as_strings_like_kafka_07() -> None:
    snap = ClusterSnapshot(topics={"t": {1: 11, 0: 2}})
    names = snap.broker_partitions("t")
    assert names[:4] == ["0-0", "0-1", "1-0", "1-1"]
    assert names.index("1-10") < names.index("1-2")  # string order, as ZkUtils sorts
    assert parse_partition_name(partition_name(12, 3)) == (12, 3)
    with pytest.raises(ValueError):
        parse_partition_name("x-1")


def test_view_follows_brokers_and_topics(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    view = RegistryView(zk)
    assert view.start().brokers == {}
    seen: list[ClusterSnapshot] = []
    view.add_listener(seen.append)
    try:
        with zk_broker(tmp_path, zk_connect, broker_id=2, num_partitions=4) as b:
            b.broker.logs.create_topic("dogs", 4)
            wait_for(lambda: view.snapshot.partition_count("dogs", 2) == 4, what="dogs listed")
            assert view.snapshot.brokers[2].port == b.port
            wait_for(lambda: view.snapshot.brokers[2].grpc_port == b.grpc_port, what="gRPC port listed")
            assert view.snapshot.broker_partitions("dogs") == ["2-0", "2-1", "2-2", "2-3"]
            zk.set("/brokers/topics/dogs/2", b"5")  # a count that changes is followed too
            wait_for(lambda: view.snapshot.partition_count("dogs", 2) == 5, what="count change")
        wait_for(lambda: 2 not in view.snapshot.brokers and view.snapshot.partition_count("dogs", 2) is None,
                 what="broker gone")
        assert seen and seen[-1] == view.snapshot
    finally:
        view.close()

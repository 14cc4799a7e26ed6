"""The rill source reads a topic spread over a cluster of brokers on ZooKeeper.

Each broker numbers its own partitions from 0; the source reads each partition from
its broker with that broker's number and reports the cluster-wide one (docs/protocol.md).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from rill.client.simple import SimpleConsumer
from tests.spark.helpers import produce, read, rows_of
from tests.zookeeper.test_broker_registration import wait_for, zk_broker


@pytest.mark.slow
def test_batch_read_of_a_topic_on_two_brokers(spark: Any, tmp_path: Path, zk_connect: str) -> None:
    with ExitStack() as stack:
        b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1))
        b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2))
        b1.broker.logs.create_topic("spread", 1)

        def partitions() -> set[tuple[int, ...]]:
            """Each broker's METADATA of the topic (the source asks any of them): the leader of every partition."""
            seen = set()
            for b in (b1, b2):
                with SimpleConsumer(b.host, b.port, timeout=5) as c:
                    seen.add(c.metadata(["spread"]).topics[0].leaders)
            return seen

        wait_for(lambda: partitions() == {(1,)}, what="broker 1's partition mapped, as both brokers see it")
        b2.broker.logs.create_topic("spread", 2)
        wait_for(lambda: partitions() == {(1, 2, 2)}, what="broker 2's partitions mapped, as both brokers see it")
        expected = []
        for b, number, cluster_partition in ((b1, 0, 0), (b2, 0, 1), (b2, 1, 2)):
            values = [f"{b.broker_id}-{number}-{i}".encode() for i in range(4)]
            first, _ = produce(b, "spread", number, values)
            offset = first
            for v in values:
                expected.append((cluster_partition, offset, v))
                offset += 4 + 6 + len(v)  # length field, then magic 1, attributes, CRC and the payload
        df = read(spark, b1, subscribe="spread")
        assert df.rdd.getNumPartitions() == 3
        assert rows_of(df) == sorted(expected)

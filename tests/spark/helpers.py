"""Helpers of the Spark tests: topics, produce, and the rows of a topic or a DataFrame."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rill.broker.testing import RunningBroker
from rill.client.simple import SimpleConsumer, SimpleProducer


def create(broker: RunningBroker, topic: str, partitions: int) -> None:
    with SimpleConsumer(broker.host, broker.port) as c:
        c.create_topic(topic, partitions)


def produce(broker: RunningBroker, topic: str, partition: int, values: Sequence[bytes]) -> tuple[int, int]:
    """Append ``values`` to one partition (acknowledged); (first offset, next offset)."""
    with SimpleProducer(broker.host, broker.port) as p:
        ack = p.send(topic, list(values), partition=partition)
    return ack.first_offset, ack.next_offset


def topic_rows(broker: RunningBroker, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    """Every message of ``topic`` as (partition, offset, value), read with the simple consumer."""
    rows = []
    with SimpleConsumer(broker.host, broker.port) as c:
        for p in range(partitions):
            offset, end = c.earliest_offset(topic, p), c.latest_offset(topic, p)
            while offset < end:
                messages = c.fetch(topic, p, offset)
                rows.extend((p, m.offset, m.value) for m in messages)
                offset = messages[-1].next_offset
    return rows


def read(spark: Any, broker: RunningBroker, **options: str) -> Any:
    return spark.read.format("rill").option("bootstrap", broker.address).options(**options).load()


def rows_of(df: Any) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.select("partition", "offset", "value").collect())

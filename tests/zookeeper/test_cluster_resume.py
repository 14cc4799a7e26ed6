"""A native Consumer in a two-broker cluster rides out one broker's absence (issue 5, "Clusters in native mode").

While broker 2 is down the consumer keeps reading broker 1's partitions; when broker 2
comes back (same id and data directory, new ports) the consumer resumes its partitions
where it left them, with nothing lost and nothing read twice.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from rill.client.consumer import Consumer, Message
from rill.client.producer import Producer
from rill.client.protocol import requests as rq
from tests.zookeeper.test_broker_registration import wait_for, zk_broker
from tests.zookeeper.test_cluster_metadata import metadata

TOPIC = "t"


def produce(address: str, partitions: list[int], tag: str) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {p: [] for p in partitions}
    with Producer(bootstrap_servers=address, linger_ms=1) as producer:
        responses = [(p, f"{tag}-{p}-{n}".encode()) for p in partitions for n in range(5)]
        futures = [(p, v, producer.send(TOPIC, v, partition=p)) for p, v in responses]
        for p, v, f in futures:
            assert f.get_error(timeout=10) is None, (p, v)
            sent[p].append(v)
    return sent


def poll_into(consumer: Consumer, got: list[Message], want: dict[int, list[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(set(v) <= {m.value for m in got if m.partition == p} for p, v in want.items()):
        assert time.monotonic() < deadline, f"timed out; got {sorted((m.partition, m.value) for m in got)}"
        got.extend(consumer.poll(0.2))


def test_consumer_keeps_the_live_broker_and_resumes_the_returning_one(tmp_path: Path, zk_connect: str) -> None:
    """Broker 1's partitions go on while broker 2 is down; broker 2's resume from where they were when it returns."""
    with ExitStack() as stack:
        b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1))
        b2_stack = ExitStack()
        b2 = b2_stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2))
        b1.broker.logs.create_topic(TOPIC, 2)
        wait_for(lambda: metadata(b2, TOPIC).partitions == 2, what="broker 1's partitions in the map")
        b2.broker.logs.create_topic(TOPIC, 2)
        wait_for(lambda: metadata(b1, TOPIC).leaders == (1, 1, 2, 2), what="four partitions")
        a1 = f"{b1.host}:{b1.port}"
        first = produce(a1, [0, 1, 2, 3], "before")
        consumer = Consumer(bootstrap_servers=a1, group_id="resume", auto_offset_reset="earliest",
                            metadata_max_age_ms=500, fetch_max_wait_ms=100)
        stack.callback(consumer.close)
        got: list[Message] = []
        consumer.subscribe([TOPIC])
        poll_into(consumer, got, first, 20)

        b2_stack.close()  # broker 2 stops; its partitions lose their leader
        wait_for(lambda: metadata(b1, TOPIC).leaders == (1, 1, rq.NO_LEADER, rq.NO_LEADER),
                 what="broker 2's partitions leaderless")
        mark = len(got)
        during = produce(a1, [0, 1], "during")
        poll_into(consumer, got, during, 20)
        assert {m.partition for m in got[mark:]} == {0, 1}

        b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2))  # same data dir, new ports
        wait_for(lambda: metadata(b1, TOPIC).leaders == (1, 1, 2, 2), what="broker 2 back")
        mark = len(got)
        after = produce(a1, [0, 1, 2, 3], "after")
        poll_into(consumer, got, after, 20)
        for p in (2, 3):  # resumed where they were: nothing of before read again
            assert [m.value for m in got[mark:] if m.partition == p] == after[p]
        values = [m.value for m in got]
        assert len(values) == len(set(values))  # nothing read twice

"""A send's future as kafka-python code uses it: get() -> RecordMetadata, add_callback, add_errback."""

from __future__ import annotations

import threading
import pytest

from rill.broker.testing import RunningBroker
from rill.client.errors import InvalidTopic
from rill.client.producer import Producer, RecordMetadata
from rill.client.protocol.messages import encode_message
from rill.client.simple import SimpleConsumer


def test_get_returns_where_the_message_was_stored(broker: RunningBroker) -> None:
    with Producer(bootstrap_servers=[broker.address], value_serializer=str.encode) as producer:
        first = producer.send("kp", "one", partition=1).get(timeout=10)
        second = producer.send("kp", "two", partition=1).get(timeout=10)
    assert isinstance(first, RecordMetadata)
    assert (first.topic, first.partition, first.offset) == ("kp", 1, 0)
    assert (second.partition, second.offset) == (1, len(encode_message(b"one")))  # byte offsets
    with SimpleConsumer(broker.host, broker.port, timeout=10) as consumer:
        assert [m.value for m in consumer.fetch("kp", 1, second.offset)] == [b"two"]


def test_callbacks_see_success_or_failure_never_both(broker: RunningBroker) -> None:
    seen: list[object] = []
    done = threading.Event()

    def record(item: object) -> None:
        seen.append(item)
        if len(seen) == 2:
            done.set()

    with Producer(bootstrap_servers=broker.address) as producer:
        producer.send("kp", b"fine").add_callback(record).add_errback(record)
        bad = producer.send("bad name!", b"x").add_callback(record).add_errback(record)
        assert done.wait(10)
        with pytest.raises(InvalidTopic):
            bad.get(timeout=10)
    assert {type(item) for item in seen} == {RecordMetadata, InvalidTopic}
    ok = next(item for item in seen if isinstance(item, RecordMetadata))
    assert ok.topic == "kp" and ok.offset >= 0

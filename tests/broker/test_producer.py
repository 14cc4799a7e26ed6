"""The Producer against a real in-process broker: offsets, partitioning, compression, acks,
topic creation, buffer limits, ordering, flush/close, and broker failures."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import ConnectionClosed, InvalidTopic, MessageTooLarge, UnknownTopic, WrongPartition
from rill.client.producer import BufferFull, DefaultPartitioner, Producer, ProducerClosed, ProducerTimeout, SendResponse
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer


def producer_for(broker: RunningBroker, **settings: Any) -> Producer:
    return Producer({"bootstrap.servers": broker.address, "request.timeout.ms": 10000}, **settings)


@pytest.fixture
def producer(broker: RunningBroker) -> Iterator[Producer]:
    with producer_for(broker) as p:
        yield p


@pytest.fixture
def consumer(broker: RunningBroker) -> Iterator[SimpleConsumer]:
    with SimpleConsumer(broker.host, broker.port, timeout=10) as c:
        yield c


def fetch_all(consumer: SimpleConsumer, topic: str, partition: int) -> list[Message]:
    out: list[Message] = []
    offset = 0
    while True:
        batch = consumer.fetch(topic, partition, offset)
        if not batch:
            return out
        out.extend(batch)
        offset = batch[-1].next_offset


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- offsets and partitions


def test_send_offsets_are_where_the_messages_are(producer: Producer, consumer: SimpleConsumer) -> None:
    """Each message's offset from its SendResponse is where a fetch finds that message."""
    responses = [producer.send("t", f"message {i}".encode(), partition=i % 2) for i in range(50)]
    producer.flush()
    found = {(m.partition, m.offset): m.value for p in (0, 1) for m in fetch_all(consumer, "t", p)}
    assert len(found) == 50
    for i, r in enumerate(responses):
        assert found[(r.partition, r.get_offset())] == f"message {i}".encode()


def test_send_many_gives_every_message_its_offset(producer: Producer, consumer: SimpleConsumer) -> None:
    """send_many returns one response whose get_offsets are the fetched offsets, in order."""
    values = [b"v%d" % i for i in range(3000)]  # several batches
    response = producer.send_many("t", values, partition=1)
    offsets = response.get_offsets(timeout=10)
    messages = fetch_all(consumer, "t", 1)
    assert [m.value for m in messages] == values
    assert [m.offset for m in messages] == offsets


def test_keys_land_on_their_hash_partition(producer: Producer, consumer: SimpleConsumer) -> None:
    """A keyed message goes to murmur2(key) % partitions, every time."""
    responses = {f"user-{i}": producer.send("keyed", b"x", key=f"user-{i}") for i in range(40)}
    expected = DefaultPartitioner()
    for key, response in responses.items():
        response.get_offset(timeout=10)
        assert response.partition == expected("keyed", key.encode(), 2)
    assert sum(len(fetch_all(consumer, "keyed", p)) for p in (0, 1)) == 40


def test_new_topic_is_created_without_the_caller_waiting(producer: Producer, consumer: SimpleConsumer) -> None:
    """send to a topic that does not exist returns at once; the broker creates it and keyed messages land right."""
    started = time.monotonic()
    responses = [producer.send("brand-new", b"%d" % i, key=b"k%d" % i) for i in range(20)]
    assert time.monotonic() - started < 0.5
    for i, r in enumerate(responses):
        r.get_offset(timeout=10)
        assert r.partition == DefaultPartitioner()("brand-new", b"k%d" % i, 2)
    assert consumer.partitions_for("brand-new") == 2


def test_topic_not_created_when_the_broker_refuses(tmp_path: Path) -> None:
    """With auto.create.topics.enable=false the send fails with UnknownTopic, and works once the topic exists."""
    with running_broker(tmp_path / "data", auto_create_topics_enable=False) as b, producer_for(b) as p:
        assert isinstance(p.send("missing", b"x").get_error(timeout=10), UnknownTopic)
        with SimpleConsumer(b.host, b.port) as c:
            c.create_topic("missing", 1)
        assert p.send("missing", b"x").get_offset(timeout=10) == 0


def test_many_partitions_share_messages_without_keys(tmp_path: Path) -> None:
    """Messages without a key go round robin over all 16 partitions of a topic."""
    with running_broker(tmp_path / "data") as b, producer_for(b) as p, SimpleConsumer(b.host, b.port) as c:
        c.create_topic("wide", 16)
        responses = [p.send("wide", b"x") for _ in range(1600)]
        p.flush()
        assert all(r.done() and r.get_error() is None for r in responses)
        assert [len(fetch_all(c, "wide", part)) for part in range(16)] == [100] * 16


# ---------------------------------------------------------------- compression and acks


def test_gzip_round_trip(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """With gzip a batch is one compressed message: the values come back and share its offset."""
    values = [b"repetitive json %d" % i for i in range(100)]
    with producer_for(broker, compression_type="gzip") as p:
        first = p.send("z", b"first", partition=0).get_offset(timeout=10)
        offsets = p.send_many("z", values, partition=0).get_offsets(timeout=10)
    messages = fetch_all(consumer, "z", 0)
    assert first == 0 and [m.value for m in messages] == [b"first", *values]
    assert set(offsets) == {messages[1].offset} and messages[1].offset > first


def test_acks_fsync_acknowledges_with_offsets(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """acks=fsync completes once the broker has synced, with the real offsets."""
    with producer_for(broker, acks="fsync") as p:
        offsets = p.send_many("durable", [b"a", b"b"], partition=0).get_offsets(timeout=10)
    assert [m.offset for m in fetch_all(consumer, "durable", 0)] == offsets == [0, 11]


def test_acks_none_completes_when_written(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """acks=none (0.7 MULTIPRODUCE) completes futures with offset -1 once written; the messages arrive."""
    with producer_for(broker, acks="none") as p:
        p.send("fire", b"warm-up", partition=0).get_offset(timeout=10)
        responses = [p.send("fire", b"%d" % i, partition=0) for i in range(100)]
        p.flush(timeout=10)
    assert {r.get_offset() for r in responses} == {-1}
    deadline = time.monotonic() + 10
    while len(fetch_all(consumer, "fire", 0)) < 101 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [m.value for m in fetch_all(consumer, "fire", 0)][1:] == [b"%d" % i for i in range(100)]


# ---------------------------------------------------------------- errors on the future


def test_invalid_topic_fails_the_future_not_the_producer(producer: Producer) -> None:
    """An illegal topic name fails that send's future with InvalidTopic; the producer goes on working."""
    assert isinstance(producer.send("no spaces", b"x").get_error(timeout=5), InvalidTopic)
    assert isinstance(producer.send_many("../etc", [b"x"]).get_error(timeout=5), InvalidTopic)
    assert producer.send("fine", b"x").get_offset(timeout=10) == 0


def test_missing_partition_fails_the_future(producer: Producer) -> None:
    """An explicit partition the topic does not have fails with WrongPartition."""
    producer.send("two", b"x", partition=0).get_offset(timeout=10)
    assert isinstance(producer.send("two", b"x", partition=2).get_error(timeout=5), WrongPartition)
    assert isinstance(producer.send("not-yet-known", b"x", partition=9).get_error(timeout=10), WrongPartition)


def test_oversized_message_fails_alone(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """A message over max.request.size fails with MessageTooLarge; the messages around it are delivered."""
    with producer_for(broker, max_request_size=1000) as p:
        before = p.send("sizes", b"small", partition=0)
        big = p.send("sizes", b"x" * 2000, partition=0)
        after = p.send("sizes", b"small too", partition=0)
        p.flush()
    assert isinstance(big.get_error(), MessageTooLarge)
    assert before.get_error() is None and after.get_error() is None
    assert [m.value for m in fetch_all(consumer, "sizes", 0)] == [b"small", b"small too"]


def test_callback_errors_are_logged_and_do_not_stop_sending(producer: Producer) -> None:
    """A completion callback that raises is logged; other callbacks and later sends still run."""
    called: list[SendResponse] = []

    def broken(response: SendResponse) -> None:
        raise RuntimeError("user bug")

    with capture_logs() as logs:
        producer.send("cb", b"1", partition=0).on_completion(broken)
        second = producer.send("cb", b"2", partition=0)
        second.on_completion(called.append)
        producer.flush()
        deadline = time.monotonic() + 5
        while not called and time.monotonic() < deadline:
            time.sleep(0.01)
    assert called == [second]
    assert any(e["event"] == "producer.callback_failed" for e in logs)


# ---------------------------------------------------------------- buffer, ordering, flush, close


def test_buffer_full_blocks_then_raises() -> None:
    """With nothing to send to, send blocks max.block.ms once buffer.memory is used, then raises BufferFull."""
    port = free_port()  # nothing listens there
    with Producer(bootstrap_servers=f"127.0.0.1:{port}", buffer_memory=1000, max_block_ms=300) as p:
        queued = [p.send("t", b"x" * 190) for _ in range(5)]
        started = time.monotonic()
        with pytest.raises(BufferFull):
            p.send("t", b"x" * 190)
        assert time.monotonic() - started >= 0.29
        assert p.buffered_bytes == 1000
        p.close(timeout=0)
    assert all(isinstance(r.get_error(timeout=5), ProducerClosed) for r in queued)


def test_buffer_memory_bounds_what_is_queued(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """Sending far more than buffer.memory waits for acknowledgements; never more is held, and all arrive."""
    with producer_for(broker, buffer_memory=4000, batch_size=1000) as p:
        high = 0
        responses = []
        for i in range(2000):
            responses.append(p.send("bounded", b"%090d" % i, partition=0))
            high = max(high, p.buffered_bytes)
        p.flush()
    assert high <= 4000
    assert all(r.get_error() is None for r in responses)
    assert len(fetch_all(consumer, "bounded", 0)) == 2000


def test_order_is_kept_per_partition(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """Numbered messages of each key (and so each partition) are stored in the order they were sent."""
    with producer_for(broker, batch_size=500) as p:
        for i in range(3000):
            p.send("ordered", b"%s:%d" % (b"ab"[i % 2:i % 2 + 1], i), key=b"ab"[i % 2:i % 2 + 1])
    for partition in (0, 1):
        by_key: dict[bytes, list[int]] = {}
        for m in fetch_all(consumer, "ordered", partition):
            key, number = m.value.split(b":")
            by_key.setdefault(key, []).append(int(number))
        for numbers in by_key.values():
            assert numbers == sorted(numbers)
    assert sum(len(fetch_all(consumer, "ordered", p)) for p in (0, 1)) == 3000


def test_sends_from_several_threads_all_arrive_in_order(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """Four threads sending at once: every message arrives, each thread's in its own order."""
    with producer_for(broker) as p:
        def run(thread: int) -> None:
            for i in range(500):
                p.send("threads", b"%d:%d" % (thread, i), partition=thread % 2)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    seen: dict[int, list[int]] = {}
    for partition in (0, 1):
        for m in fetch_all(consumer, "threads", partition):
            thread, number = map(int, m.value.split(b":"))
            seen.setdefault(thread, []).append(number)
    assert seen == {t: list(range(500)) for t in range(4)}


def test_flush_sends_without_waiting_for_linger(broker: RunningBroker) -> None:
    """flush sends a lingering batch at once and returns when it is acknowledged."""
    with producer_for(broker, linger_ms=60000) as p:
        response = p.send("lazy", b"x")
        started = time.monotonic()
        p.flush(timeout=10)
        assert response.done() and time.monotonic() - started < 5


def test_close_completes_everything_then_refuses_sends(broker: RunningBroker) -> None:
    """close delivers every pending message; afterwards send raises ProducerClosed; close again is a no-op."""
    p = producer_for(broker, linger_ms=50)
    responses = [p.send("closing", b"%d" % i) for i in range(1000)]
    p.close()
    assert all(r.done() and r.get_error() is None for r in responses)
    with pytest.raises(ProducerClosed):
        p.send("closing", b"late")
    p.close()


def test_close_from_a_callback_does_not_deadlock(broker: RunningBroker) -> None:
    """close called inside a completion callback (the send thread) returns, and later sends raise."""
    p = producer_for(broker)
    done = threading.Event()
    p.send("cb-close", b"x").on_completion(lambda r: (p.close(), done.set()))
    assert done.wait(10)
    with pytest.raises(ProducerClosed):
        p.send("cb-close", b"y")
    p.close()


# ---------------------------------------------------------------- broker failures


def test_unreachable_broker_fails_futures_after_request_timeout() -> None:
    """With no broker reachable, futures fail with ProducerTimeout after request.timeout.ms, none hangs."""
    with Producer(bootstrap_servers=f"127.0.0.1:{free_port()}", request_timeout_ms=300) as p:
        response = p.send("t", b"x")
        error = response.get_error(timeout=5)
    assert isinstance(error, ProducerTimeout)


def test_broker_stopped_fails_queued_batches_after_request_timeout(tmp_path: Path) -> None:
    """Batches for a partition whose broker went away fail with ProducerTimeout once request.timeout.ms passes."""
    with running_broker(tmp_path / "data") as b:
        p = producer_for(b, request_timeout_ms=500, retries=0)
        p.send("t", b"x", partition=0).get_offset(timeout=10)
    started = time.monotonic()
    responses = [p.send("t", b"y", partition=0) for _ in range(10)]
    errors = {type(r.get_error(timeout=10)) for r in responses}
    assert errors == {ProducerTimeout} and time.monotonic() - started < 5
    p.close()


def test_broker_restart_while_producing_leaves_no_future_hanging(tmp_path: Path) -> None:
    """Producing through a broker stop and restart: every future ends, and each success is really in the log."""
    port, data = free_port(), tmp_path / "data"
    sent: list[tuple[bytes, SendResponse]] = []
    stop = threading.Event()
    p = Producer(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=4000, retries=3, retry_backoff_ms=50)

    def produce() -> None:
        i = 0
        while not stop.is_set():
            value = b"%d" % i
            sent.append((value, p.send("restart", value, key=value)))
            i += 1
            time.sleep(0.0005)

    thread = threading.Thread(target=produce)
    with running_broker(data, port=port, num_partitions=2):
        thread.start()
        time.sleep(0.5)
    before_restart = len(sent)
    time.sleep(0.3)  # the broker is down
    with running_broker(data, port=port, num_partitions=2) as b:
        time.sleep(0.5)
        stop.set()
        thread.join()
        p.flush(timeout=30)
        assert all(r.done() for _, r in sent)
        errors = [r.get_error() for _, r in sent if r.get_error() is not None]
        assert all(isinstance(e, (ConnectionClosed, ProducerTimeout)) for e in errors)
        ok = [(value, r) for value, r in sent if r.get_error() is None]
        assert any(r is sent[0][1] for _, r in ok) and len(sent) > before_restart
        assert any(sent.index((v, r)) >= before_restart for v, r in ok[-10:])
        with SimpleConsumer(b.host, b.port) as c:
            stored = {(part, m.offset): m.value for part in (0, 1) for m in fetch_all(c, "restart", part)}
        assert all(stored[(r.partition, r.get_offset())] == value for value, r in ok)
    p.close()


def test_send_many_larger_than_the_buffer_is_refused_whole(broker: RunningBroker) -> None:
    """A send_many that could never fit in buffer.memory raises ValueError and queues nothing."""
    with producer_for(broker, buffer_memory=1000) as p:
        with pytest.raises(ValueError, match="buffer.memory"):
            p.send_many("t", [b"x" * 100] * 20)
        assert p.buffered_bytes == 0


def test_open_producer_is_flushed_when_the_interpreter_exits(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """A program that never calls close still delivers its queued messages when it exits."""
    code = ("import sys; from rill.client import Producer; "
            "p = Producer(bootstrap_servers=sys.argv[1], linger_ms=60000); "
            "[p.send('at-exit', b'%d' % i, partition=0) for i in range(100)]")
    subprocess.run([sys.executable, "-c", code, broker.address], check=True, timeout=60, capture_output=True)
    assert [m.value for m in fetch_all(consumer, "at-exit", 0)] == [b"%d" % i for i in range(100)]

"""SendResponse: waiting, offsets, errors and callbacks, driven by resolving batches by hand."""

from __future__ import annotations

import threading
import time

import pytest

from rill.client.errors import MessageTooLarge
from rill.client.producer.accumulator import ProducerBatch, Unassigned
from rill.client.producer.errors import ProducerTimeout
from rill.client.producer.future import MESSAGE_OVERHEAD, BatchResult, SendResponse


def batch_of(*payloads: bytes, partition: int = 0) -> ProducerBatch:
    batch = ProducerBatch("t", partition, 0.0, 100.0)
    batch.payloads.extend(payloads)
    batch.lengths = [len(p) for p in payloads]
    return batch


def complete(batch: BatchResult, first_offset: int = 0) -> None:
    batch.first_offset = first_offset
    for callback in batch.resolve():
        callback()


def test_offsets_follow_the_encoded_sizes() -> None:
    """Message i's offset is the first offset plus the encoded sizes of the messages before it."""
    batch = batch_of(b"a", b"bcd", b"")
    response = SendResponse(((batch, 0, 3),), 3)
    complete(batch, 1000)
    assert response.get_offsets() == [1000, 1000 + MESSAGE_OVERHEAD + 1, 1000 + 2 * MESSAGE_OVERHEAD + 4]
    assert SendResponse._single(batch, 2).get_offset() == 1000 + 2 * MESSAGE_OVERHEAD + 4


def test_compressed_messages_share_the_wrapper_offset() -> None:
    """Every message of a gzip batch has the offset of its wrapper message."""
    batch = batch_of(b"a", b"b")
    batch.compressed = True
    complete(batch, 77)
    assert SendResponse(((batch, 0, 2),), 2).get_offsets() == [77, 77]


def test_wait_times_out_and_get_offset_raises_producer_timeout() -> None:
    """A pending response is not done; wait returns False and get_offset raises ProducerTimeout."""
    response = SendResponse._single(batch_of(b"x"), 0)
    assert not response.done()
    assert response.wait(0.01) is False
    with pytest.raises(ProducerTimeout):
        response.get_offset(timeout=0.01)


def test_waiter_wakes_when_the_batch_completes() -> None:
    """A thread blocked in get_offset returns as soon as the batch is acknowledged."""
    batch = batch_of(b"x")
    response = SendResponse._single(batch, 0)
    threading.Timer(0.05, complete, (batch, 42)).start()
    started = time.monotonic()
    assert response.get_offset(timeout=5) == 42
    assert time.monotonic() - started < 2


def test_failed_batch_gives_its_error() -> None:
    """get_error returns the failure and get_offset raises it."""
    batch = batch_of(b"x")
    batch.error = MessageTooLarge("too big")
    complete(batch)
    response = SendResponse._single(batch, 0)
    assert isinstance(response.get_error(), MessageTooLarge)
    with pytest.raises(MessageTooLarge):
        response.get_offset()


def test_callback_runs_once_on_completion_with_the_response() -> None:
    """on_completion's callback runs once, when the batch completes, with the response."""
    batch = batch_of(b"x")
    response = SendResponse._single(batch, 0)
    calls: list[SendResponse] = []
    response.on_completion(calls.append)
    assert calls == []
    complete(batch)
    assert calls == [response]


def test_callback_on_a_done_response_runs_at_once() -> None:
    """A callback added after completion runs immediately in the caller's thread."""
    result = BatchResult.failed("t", MessageTooLarge())
    calls: list[SendResponse] = []
    SendResponse(((result, 0, 1),), 1).on_completion(calls.append)
    assert len(calls) == 1


def test_response_over_several_batches_is_done_when_all_are() -> None:
    """A send_many spread over two batches completes, and calls back once, after both."""
    first, second = batch_of(b"a", b"b"), batch_of(b"c")
    response = SendResponse(((first, 1, 1), (second, 0, 1)), 2)
    calls: list[SendResponse] = []
    response.on_completion(calls.append)
    complete(first, 0)
    assert not response.done() and calls == []
    complete(second, 500)
    assert response.done() and calls == [response]
    assert response.get_offsets() == [MESSAGE_OVERHEAD + 1, 500]


def test_unassigned_response_follows_its_messages_to_their_batch() -> None:
    """A response queued before its topic's partitions were known waits and calls back via its real batch."""
    pending = Unassigned("t", 0.0)
    response = SendResponse(((pending, 0, 1),), 1)
    calls: list[SendResponse] = []
    response.on_completion(calls.append)
    assert response.partition is None
    batch = batch_of(b"x", partition=3)
    response._assign(((batch, 0, 1),))
    for callback in pending.resolve():
        callback()
    assert not response.done() and calls == []
    assert response.partition == 3
    threading.Timer(0.05, complete, (batch, 9)).start()
    assert response.get_offset(timeout=5) == 9
    assert calls == [response]


def test_empty_response_is_done() -> None:
    """A send_many of nothing is done at once and has no offsets."""
    response = SendResponse(((BatchResult.done_empty("t"), 0, 0),), 0)
    assert response.done() and response.get_offsets() == [] and len(response) == 0

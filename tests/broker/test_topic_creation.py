"""Topic creation on a running broker: one set of limits for both planes, and no event-loop stall."""

from __future__ import annotations

import os
import threading
import time

import grpc
import pytest

from rill.broker.dataplane import topic_creation
from rill.broker.log import creator
from rill.broker.testing import running_broker
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb

from tests.conftest import RawClient


def _partition_dirs(data_dir) -> set[str]:
    return {n for n in os.listdir(data_dir) if n[:1] != "." and os.path.isdir(os.path.join(data_dir, n))}


def test_both_planes_enforce_the_same_partition_limits(tmp_path):
    """CREATE_TOPIC and Admin CreateTopic refuse the same counts with matching codes, before touching the disk."""
    data = tmp_path / "data"
    with running_broker(data, num_partitions_max=50, max_broker_partitions=60) as b:
        raw = RawClient(b.host, b.port)
        with grpc.insecure_channel(b.grpc_address) as channel:
            admin = apb_grpc.AdminStub(channel)
            assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("wide", 51)))[0] == \
                ErrorCode.INVALID_PARTITIONS
            assert admin.CreateTopic(apb.CreateTopicRequest(topic="wide", partitions=51)).error_code == \
                pb.INVALID_PARTITIONS
            assert admin.CreateTopic(apb.CreateTopicRequest(topic="wide", partitions=10_001)).error_code == \
                pb.INVALID_PARTITIONS
            assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("a", 50))) == (0, 50)
            assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("b", 11)))[0] == \
                ErrorCode.PARTITION_LIMIT_REACHED
            response = admin.CreateTopic(apb.CreateTopicRequest(topic="b", partitions=11))
            assert response.error_code == pb.PARTITION_LIMIT_REACHED and "max.broker.partitions" in response.error_message
            assert admin.CreateTopic(apb.CreateTopicRequest(topic="c", partitions=10)).error_code == pb.NONE
        raw.close()
        assert _partition_dirs(data) == {f"a-{p}" for p in range(50)} | {f"c-{p}" for p in range(10)}


def test_create_topic_is_answered_after_creation_while_others_are_served(tmp_path, monkeypatch):
    """While a large topic is being created, another connection is answered at once and the creator gets its answer later."""
    gate = threading.Event()
    real_mkdir = os.mkdir

    def slow(path, *args, **kwargs):
        gate.wait(10)
        return real_mkdir(path, *args, **kwargs)

    with running_broker(tmp_path / "data") as b:
        monkeypatch.setattr(creator.os, "mkdir", slow)
        creating = RawClient(b.host, b.port)
        creating.send(rq.encode_create_topic("big", 20))
        other = RawClient(b.host, b.port)
        start = time.monotonic()
        assert rq.decode_offsets_response(other.request(rq.encode_offsets("x", 0, -1, 1))) == (0, [0])
        assert time.monotonic() - start < 2.0
        gate.set()
        assert rq.decode_create_topic_response(creating.response()) == (0, 20)
        creating.close()
        other.close()


def test_a_produce_to_a_new_topic_waits_for_it_on_its_own_connection(tmp_path, monkeypatch):
    """Auto-creation parks only the producing connection; its later requests are answered in order after the produce."""
    gate = threading.Event()
    real_mkdir = os.mkdir

    def slow(path, *args, **kwargs):
        gate.wait(10)
        return real_mkdir(path, *args, **kwargs)

    with running_broker(tmp_path / "data", num_partitions=3) as b:
        monkeypatch.setattr(creator.os, "mkdir", slow)
        producer = RawClient(b.host, b.port)
        producer.send(rq.encode_produce("fresh", 1, encode_message_set([b"first"])))  # no response (0.7)
        producer.send(rq.encode_produce_ack([rq.ProduceRequest("fresh", 2, encode_message_set([b"second"]))]))
        producer.send(rq.encode_offsets("fresh", 1, -1, 1))
        other = RawClient(b.host, b.port)
        assert rq.decode_offsets_response(other.request(rq.encode_offsets("y", 0, -1, 1))) == (0, [0])
        gate.set()
        _, [ack] = rq.decode_produce_ack_response(producer.response())
        assert (ack.error, ack.partition, ack.first_offset) == (0, 2, 0)
        assert rq.decode_offsets_response(producer.response()) == (0, [len(encode_message_set([b"first"]))])
        producer.close()
        other.close()


def test_a_failed_auto_creation_is_answered_once_and_the_connection_goes_on(tmp_path, monkeypatch):
    """A creation that fails on disk answers StorageError for that topic (no retry loop); the connection stays usable."""
    real_mkdir = os.mkdir
    attempts: list[str] = []

    def full(path, *args, **kwargs):
        if "doomed" in str(path):
            attempts.append(str(path))
            raise OSError(28, "No space left on device", str(path))
        return real_mkdir(path, *args, **kwargs)

    with running_broker(tmp_path / "data") as b:
        monkeypatch.setattr(creator.os, "mkdir", full)
        raw = RawClient(b.host, b.port)
        _, acks = rq.decode_produce_ack_response(raw.request(rq.encode_produce_ack([
            rq.ProduceRequest("doomed", 0, encode_message_set([b"x"])),
            rq.ProduceRequest("fine", 0, encode_message_set([b"y"]))])))
        assert [a.error for a in acks] == [ErrorCode.STORAGE_ERROR, 0]
        assert len(attempts) == 1
        assert rq.decode_offsets_response(raw.request(rq.encode_offsets("fine", 0, -1, 1)))[1] == [acks[1].next_offset]
        raw.close()


def test_as_broker_error_names_the_file():
    """A creation's OSError becomes a StorageError naming the topic, the reason and the file."""
    error = topic_creation.as_broker_error("t", OSError(28, "No space left on device", "/data/t-3"))
    assert error.code == ErrorCode.STORAGE_ERROR and "/data/t-3" in str(error) and "No space left" in str(error)


@pytest.mark.parametrize("auto_create", [True, False])
def test_produce_to_a_missing_topic_without_auto_create_is_unknown(tmp_path, auto_create):
    """With auto.create.topics.enable false a produce to a missing topic answers UnknownTopic and creates nothing."""
    with running_broker(tmp_path / "data", auto_create_topics_enable=auto_create) as b:
        raw = RawClient(b.host, b.port)
        _, [ack] = rq.decode_produce_ack_response(raw.request(rq.encode_produce_ack([
            rq.ProduceRequest("missing", -1, encode_message_set([b"x"]))])))
        assert ack.error == (0 if auto_create else ErrorCode.UNKNOWN_TOPIC)
        assert ("missing-0" in _partition_dirs(tmp_path / "data")) == auto_create
        raw.close()

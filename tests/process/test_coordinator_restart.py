"""Committed offsets and groups survive kill -9 of the real broker."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

from tests.conftest import RawClient
from tests.process.broker_process import BrokerProcess

pytestmark = pytest.mark.slow


def test_offsets_survive_kill_9(tmp_path: Path) -> None:
    """Acknowledged commits (100 partitions) are all there after kill -9 and a restart; the generation moves on."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, "--set", "num.partitions=100").start()
    client = RawClient("127.0.0.1", broker.port)
    body = client.request(rq.encode_produce_ack([rq.ProduceRequest("k9", p, encode_message_set([b"x"]))
                                                 for p in range(100)]))
    ends = {a.partition: a.next_offset for a in rq.decode_produce_ack_response(body)[1]}
    client.close()
    with grpc.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
        stub = pb_grpc.GroupCoordinatorStub(channel)
        assert stub.CreateGroup(pb.CreateGroupRequest(consumer_group="survivor", session_timeout=10_000,
                                                      topics=["k9"]), timeout=10).error_code == pb.NONE
        member = stub.RegisterConsumer(pb.RegisterConsumerRequest(consumer_group="survivor"), timeout=10)
        committed = stub.CommitOffsets(pb.CommitOffsetsRequest(
            consumer_group="survivor", consumer_id=member.consumer_id, generation=member.generation,
            offsets=[pb.PartitionOffset(topic="k9", partition=p, offset=ends[p]) for p in range(100)]), timeout=10)
        assert committed.error_code == pb.NONE
    broker.kill9()

    again = BrokerProcess(data).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{again.grpc_port}") as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            fetched = stub.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="survivor"), timeout=10)
            assert {o.partition: o.offset for o in fetched.offsets} == ends
            beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="survivor", consumer_id=member.consumer_id,
                                                      generation=member.generation), timeout=10)
            assert beat.error_code == pb.UNKNOWN_MEMBER  # membership is live state: members re-register
            rejoined = stub.RegisterConsumer(pb.RegisterConsumerRequest(consumer_group="survivor"), timeout=10)
            assert rejoined.generation > member.generation
            assert {p.partition: p.offset for p in rejoined.partitions_to_own} == ends
    finally:
        assert again.terminate() == 0

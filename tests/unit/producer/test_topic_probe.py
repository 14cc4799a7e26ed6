"""The producer's topic probe against a fake broker: a retriable refusal means "not ready yet", not failure."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from rill.client.errors import ErrorCode
from rill.client.producer import Producer
from rill.client.protocol import requests as rq

from tests.unit.producer.test_sender import FakeBroker


class CreatingBroker:
    """Knows topic "t" only after answering ``not_ready`` probes with LeaderNotAvailable (a replicated
    topic whose leaders are being elected); then it has one partition, led by this broker."""

    def __init__(self, not_ready: int) -> None:
        self.not_ready = not_ready
        self.probes = 0
        self.fake = FakeBroker(self.answer)

    def answer(self, kind: int, request: Any, port: int) -> bytes | None:
        if kind == rq.RequestType.METADATA:
            me = rq.BrokerInfo(0, "127.0.0.1", port, 0)
            known = self.probes >= self.not_ready
            rows = [rq.TopicMetadata(t, 0, (0,)) if known else rq.TopicMetadata(t, int(ErrorCode.UNKNOWN_TOPIC), ())
                    for t in request.topics]
            return rq.encode_metadata_response(0, [me], rows)
        assert kind == rq.RequestType.PRODUCE_ACK
        produce = request.produces[0]
        if not produce.messages:  # a probe
            self.probes += 1
            return rq.encode_produce_ack_response([rq.PartitionAck(int(ErrorCode.LEADER_NOT_AVAILABLE), 0, -1, -1)])
        return rq.encode_produce_ack_response([rq.PartitionAck(0, produce.partition, 0, len(produce.messages))])


def test_probe_answered_leader_not_available_is_probed_again_until_the_topic_is_known() -> None:
    """A probe refused with LeaderNotAvailable keeps the messages waiting: metadata and the probe are asked
    again (once per retry.backoff.ms) until the topic is known, then the message is sent."""
    broker = CreatingBroker(not_ready=3)
    try:
        with capture_logs() as logs, Producer(bootstrap_servers=f"127.0.0.1:{broker.fake.port}",
                                              retry_backoff_ms=10, request_timeout_ms=5000) as p:
            assert p.send("t", b"x").get_offset(timeout=10) == 0
    finally:
        broker.fake.close()
    assert broker.probes == 3
    assert [e["event"] for e in logs if e["event"] == "producer.topic_not_ready"] == ["producer.topic_not_ready"] * 3
    assert not any(e["event"] == "producer.topic_unavailable" for e in logs)

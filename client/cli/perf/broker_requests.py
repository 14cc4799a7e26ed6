"""What the data-plane harnesses share: their arguments, the topic they use, the requests they send.

:func:`ensure_topic` finds (or creates) the topic over a :class:`SimpleConsumer`;
:func:`produce_frames` encodes PRODUCE_ACK requests before the clock starts (a small
rotating pool, as Kafka's perf tools reuse payloads), so CRC and encoding are not on
the client's clock; :func:`ack_errors` describes a refused one.
"""

from __future__ import annotations

import argparse
import random

from rill.client.cli.common import CliError, add_broker_arguments, topic_name
from rill.client.errors import UnknownTopic, error_for_code
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.simple import SimpleConsumer

ACKS = {"append": rq.Acks.APPEND, "fsync": rq.Acks.FSYNC, "all": rq.Acks.ALL}


def data_plane_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``produce``, ``consume`` and ``latency``: the broker, the topic, --json, -q."""
    add_broker_arguments(parser)
    parser.add_argument("-t", "--topic", required=True, type=topic_name)
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def ensure_topic(client: SimpleConsumer, topic: str, partitions: int | None) -> int:
    """The topic's partition count, creating it with ``partitions`` (default 1) if missing."""
    try:
        count = client.partitions_for(topic)
    except UnknownTopic:
        return client.create_topic(topic, partitions or 1)
    if partitions is not None and partitions != count:
        raise CliError(f"topic {topic!r} exists with {count} partitions, not {partitions}: "
                       "choose another --topic or drop --partitions")
    return count


def produce_frames(topic: str, partitions: int, batch: int, message_size: int, acks: int, pool: int,
                   seed: int = 7) -> list[bytes]:
    """``pool`` PRODUCE_ACK frames, each with ``batch`` random messages for every partition."""
    rng = random.Random(seed)
    frames = []
    for _ in range(pool):
        produces = [rq.ProduceRequest(topic, p, encode_message_set([rng.randbytes(message_size) for _ in range(batch)]))
                    for p in range(partitions)]
        frames.append(rq.encode_produce_ack(produces, acks))
    return frames


def ack_errors(error: int, acks: list[rq.PartitionAck]) -> str:
    """What went wrong in a PRODUCE_ACK response: the request's error, or each refused partition's."""
    if error:
        return str(error_for_code(error))
    failed = [f"partition {a.partition}: {error_for_code(a.error)}" for a in acks if a.error]
    return "; ".join(failed) or f"{len(acks)} acknowledgements"


__all__ = ["ACKS", "ack_errors", "data_plane_arguments", "ensure_topic", "produce_frames"]

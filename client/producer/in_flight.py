"""What the producer's send thread remembers of each request it has in flight.

A request's connection is a :class:`~rill.client.net.broker_socket.BrokerSocket` whose
requests carry an :class:`InFlight`: which kind of request it is, when it must be
answered by, and the batches (PRODUCE) or topics (METADATA, PROBE) it is about. The
socket and its sans-IO protocol object pair responses with requests in order; what
becomes of an answer, a timeout or a broken connection is the sender's business.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from rill.client.net.broker_socket import BrokerSocket, SocketState
from rill.client.structs import Address
from rill.client.producer.accumulator import ProducerBatch

__all__ = ["BrokerLink", "InFlight", "Kind", "SocketState", "next_deadline"]


class Kind(enum.Enum):
    PRODUCE = "produce"
    METADATA = "metadata"
    PROBE = "probe"  # the empty produce that makes the broker create a topic


@dataclass(eq=False, slots=True)
class InFlight:
    """A request queued on a connection and not yet done."""

    kind: Kind
    deadline: float
    batches: list[ProducerBatch] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    queued_at: float = 0.0  # monotonic seconds: the request latency in Producer.metrics() starts here


BrokerLink = BrokerSocket[InFlight]
"""The send thread's connection to one broker."""


def next_deadline(link: BrokerLink) -> float | None:
    """The earliest deadline of the requests in flight on ``link`` (the oldest of each kind), or None."""
    return min((request.deadline for request in link.protocol.oldest()), default=None)

"""rill.client: the producer and the consumer (``from rill.client import Producer, Consumer``),
the simple clients (rill.client.simple), the wire codec (rill.client.protocol) and the CLI."""

from rill.client.consumer import Consumer
from rill.client.producer import Producer

__all__ = ["Consumer", "Producer"]

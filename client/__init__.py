"""rill.client: the producer (``from rill.client import Producer``), the simple clients
(rill.client.simple), the wire codec (rill.client.protocol) and the CLI."""

from rill.client.producer import Producer

__all__ = ["Producer"]

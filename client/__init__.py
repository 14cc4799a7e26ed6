"""rill.client: the producer and the consumer (``from rill.client import Producer, Consumer``),
the simple clients (rill.client.simple), the wire codec (rill.client.protocol) and the CLI."""

from rill.client.library_logging import route_to_stdlib

route_to_stdlib()  # a library prints nothing: events go to `logging`, silent until the application configures it

from rill.client.consumer import Consumer  # noqa: E402
from rill.client.producer import Producer  # noqa: E402

__all__ = ["Consumer", "Producer"]

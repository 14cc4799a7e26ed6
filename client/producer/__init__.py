"""The asynchronous batching producer (seed 003): ``Producer``, its ``SendResponse`` futures,
partitioners and errors. See docs/clients.md, "Producer"."""

from rill.client.producer.errors import BufferFull, ProducerClosed, ProducerTimeout
from rill.client.producer.future import SendResponse
from rill.client.producer.partitioner import (DefaultPartitioner, Partitioner, RandomPartitioner,
                                              RoundRobinPartitioner, murmur2)
from rill.client.producer.producer import Producer
from rill.client.structs import RecordMetadata

__all__ = [
    "Producer", "SendResponse", "RecordMetadata", "Partitioner", "DefaultPartitioner", "RoundRobinPartitioner", "RandomPartitioner",
    "murmur2", "BufferFull", "ProducerClosed", "ProducerTimeout",
]

"""The single-threaded poll() consumer (seed 003): ``from rill.client.consumer import Consumer``.

See :class:`Consumer` and docs/clients.md.
"""

from rill.client.consumer.consumer import Consumer
from rill.client.consumer.errors import (CommitFailed, ConsumerError, GroupCoordinatorError, IllegalStateError,
                                         MemberEvicted, NoOffsetForPartition, RewindFailed)
from rill.client.consumer.subscription import TopicPartition
from rill.client.protocol.messages import Message
from rill.client.structs import OffsetAndTimestamp

__all__ = [
    "CommitFailed", "Consumer", "ConsumerError", "GroupCoordinatorError", "IllegalStateError", "MemberEvicted",
    "Message", "NoOffsetForPartition", "OffsetAndTimestamp", "RewindFailed", "TopicPartition",
]

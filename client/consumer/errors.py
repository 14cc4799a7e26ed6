"""The consumer's own exceptions (broker errors come from :mod:`rill.client.errors`).

Hierarchy::

    RillError
    └── ConsumerError
        ├── IllegalStateError        a call that does not fit the consumer's state
        │                            (closed, no group.id, a partition not assigned)
        ├── NoOffsetForPartition     no committed offset and auto.offset.reset is "none"
        ├── CoordinatorNotAvailable  no broker names the group's coordinator yet (retried by poll)
        └── GroupCoordinatorError    the coordinator refused a request (``code``, ``code_name``)
            ├── CommitFailed         a commit stored nothing (``partitions``: each with its code)
            ├── RewindFailed         a rewind moved nothing
            └── MemberEvicted        this member was removed from its group (raised once by poll)

poll() may also raise :class:`~rill.client.errors.OffsetOutOfRange` (auto.offset.reset
"none"), :class:`~rill.client.errors.CorruptMessageError` and other
:class:`~rill.client.errors.BrokerError` subclasses for one partition (see
:meth:`rill.client.consumer.Consumer.poll`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rill.client.grpc_client import error_name
from rill.client.consumer.subscription import TopicPartition
from rill.client.errors import RillError


class ConsumerError(RillError):
    """Base class of the consumer's errors."""


class IllegalStateError(ConsumerError):
    """The call does not fit the consumer's state (closed, no group, partition not assigned)."""


class CoordinatorNotAvailable(ConsumerError):
    """No broker could name the group's coordinator just now (one is being replaced after a broker
    died): ``poll()`` looks again after ``retry.backoff.ms`` instead of raising (Kafka's
    COORDINATOR_NOT_AVAILABLE)."""


class NoOffsetForPartition(ConsumerError):
    """Partitions with no committed offset while ``auto.offset.reset`` is ``none``: seek() them."""

    def __init__(self, partitions: Sequence[TopicPartition]) -> None:
        self.partitions = list(partitions)
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions)
        super().__init__(f"no committed offset for {names} and auto.offset.reset is 'none': seek() them")


class GroupCoordinatorError(ConsumerError):
    """The group coordinator answered with an error code (rill.v1.ErrorCode).

    ``code`` is the number, ``code_name`` its name (``NOT_OWNER``, ``UNKNOWN_MEMBER`` ...).
    """

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = error_name(code)


class CommitFailed(GroupCoordinatorError):
    """A commit was refused and stored nothing (commits are all or nothing).

    ``partitions`` maps each partition of the commit to its error code name (``NONE``
    for the partitions that were fine but not stored because another one failed);
    ``code_name`` is the first error. Typical codes: ``NOT_OWNER`` (the partition is
    not this member's), ``UNKNOWN_MEMBER`` (this member was evicted),
    ``ILLEGAL_GENERATION`` (a rebalance moved on without it), ``REBALANCE_IN_PROGRESS``
    (its partitions were rewound: the new offsets win). A standalone commit (a manual
    assignment; ``generation`` -1) gets ``NOT_OWNER`` while the group has live members.
    """

    def __init__(self, group: str, generation: int, code: int, partitions: Mapping[TopicPartition, str]) -> None:
        self.group = group
        self.generation = generation
        self.partitions = dict(partitions)
        failed = [f"{tp.topic}-{tp.partition}: {name}" for tp, name in self.partitions.items() if name != "NONE"]
        who = f"generation {generation}" if generation >= 0 else "standalone: not a member"
        super().__init__(f"commit to group {group!r} ({who}) failed with {error_name(code)}; "
                         f"nothing was stored ({'; '.join(failed) or 'no partitions'})", code)


class RewindFailed(GroupCoordinatorError):
    """RewindConsumer was refused; no offset moved. ``partitions``: per partition, its code name."""

    def __init__(self, group: str, code: int, partitions: Mapping[TopicPartition, str]) -> None:
        self.group = group
        self.partitions = dict(partitions)
        failed = [f"{tp.topic}-{tp.partition}: {name}" for tp, name in self.partitions.items() if name != "NONE"]
        super().__init__(f"rewind of group {group!r} failed with {error_name(code)}; nothing moved"
                         + (f" ({'; '.join(failed)})" if failed else ""), code)


class MemberEvicted(GroupCoordinatorError):
    """This consumer was removed from its group; poll() raises it once, then rejoins.

    Raised by the first poll() that learns of it, with the group, the member id and
    generation that were lost, and the partitions it owned (now someone else's:
    their records already returned may be delivered again to the new owner, and
    commits for them fail with CommitFailed). The usual cause is calling poll() less
    often than ``session.timeout.ms``; ``reason`` says what was seen. The next poll()
    rejoins as a new member.
    """

    def __init__(self, group: str, member_id: str, generation: int, partitions: Sequence[TopicPartition],
                 reason: str, code: int) -> None:
        self.group = group
        self.member_id = member_id
        self.generation = generation
        self.partitions = list(partitions)
        self.reason = reason
        super().__init__(f"evicted from group {group!r} (member {member_id}, generation {generation}): {reason}; "
                         f"lost {len(self.partitions)} partition(s); the next poll() rejoins", code)

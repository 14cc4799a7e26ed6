"""Wire error codes and the exceptions they map to.

Hierarchy::

    RillError
    ├── BrokerError                 an error code sent by a broker
    │   ├── UnknownError            (-1) and any code this release does not know
    │   ├── OffsetOutOfRange        (1)  offset before the log start or past its end
    │   ├── InvalidMessage          (2)  a message failed its CRC or framing check
    │   ├── WrongPartition          (3)  partition outside 0 .. num_partitions-1
    │   ├── InvalidFetchSize        (4)  max size smaller than the next message
    │   ├── MessageTooLarge         (5)  a message over message.max.bytes
    │   ├── InvalidTopic            (6)  a topic name outside [A-Za-z0-9._-]{1,249}
    │   ├── InvalidOffset           (7)  an offset that is not a message boundary
    │   ├── UnknownTopic            (8)  the topic does not exist (rill requests only)
    │   ├── RequestTimedOut         (9)  an acknowledgement did not come in time
    │   ├── StorageError            (10) the broker could not write or sync the log
    │   ├── InvalidRequest          (11) a well-framed request with bad fields
    │   ├── InvalidPartitions       (12) a partition count outside 1 .. num.partitions.max
    │   ├── PartitionLimitReached   (13) the broker already holds max.broker.partitions
    │   ├── NotLeaderForPartition   (14) this broker does not lead the partition (retriable)
    │   ├── NotEnoughReplicas       (15) acks=all refused: the ISR is below min.insync.replicas
    │   ├── NotEnoughReplicasAfterAppend (16) appended, but the ISR shrank below the minimum
    │   ├── FencedLeaderEpoch       (17) the request's leader epoch is older than the broker's
    │   ├── UnknownLeaderEpoch      (18) the request's leader epoch is newer than the broker's
    │   ├── OffsetNotAvailable      (19) a new leader's high watermark has not reached its epoch yet
    │   ├── InvalidReplicationFactor (20) a replication factor outside 1 .. live brokers
    │   ├── LeaderNotAvailable      (21) the partition has no leader yet (a topic being created; retriable)
    │   ├── UnsupportedSaslMechanism (22) the listener does not offer that SASL mechanism
    │   ├── IllegalSaslState        (23) a request out of order for SASL (before authenticating, say)
    │   ├── SaslAuthenticationFailed (24) wrong user name or password
    │   ├── TopicAuthorizationFailed (25) the principal may not do that to the topic (ACLs)
    │   ├── GroupAuthorizationFailed (26) the principal may not do that to the group (ACLs)
    │   └── ClusterAuthorizationFailed (27) the principal may not do that to the cluster (ACLs)
    ├── CorruptMessageError         a fetched message failed its CRC check
    └── ConnectionClosed            the peer closed the connection
        └── AuthenticationFailed    the TLS handshake or SASL authentication failed

Codes -1..4 are Kafka 0.7's; 5 and up are rill's and are only sent on rill's
request types (5 and up) or where 0.7 had no answer at all. Decoding a code this
release does not know yields :class:`UnknownError` carrying the code.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    WRONG_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    MESSAGE_TOO_LARGE = 5
    INVALID_TOPIC = 6
    INVALID_OFFSET = 7
    UNKNOWN_TOPIC = 8
    REQUEST_TIMED_OUT = 9
    STORAGE_ERROR = 10
    INVALID_REQUEST = 11
    INVALID_PARTITIONS = 12
    PARTITION_LIMIT_REACHED = 13
    NOT_LEADER_FOR_PARTITION = 14
    NOT_ENOUGH_REPLICAS = 15
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 16
    FENCED_LEADER_EPOCH = 17
    UNKNOWN_LEADER_EPOCH = 18
    OFFSET_NOT_AVAILABLE = 19
    INVALID_REPLICATION_FACTOR = 20
    LEADER_NOT_AVAILABLE = 21
    UNSUPPORTED_SASL_MECHANISM = 22
    ILLEGAL_SASL_STATE = 23
    SASL_AUTHENTICATION_FAILED = 24
    TOPIC_AUTHORIZATION_FAILED = 25
    GROUP_AUTHORIZATION_FAILED = 26
    CLUSTER_AUTHORIZATION_FAILED = 27


class RillError(Exception):
    """Base class of every error raised by rill."""


class BrokerError(RillError):
    """An error code returned by a broker (or raised by the broker's storage)."""

    code: ErrorCode = ErrorCode.UNKNOWN
    retriable: bool = False
    invalid_metadata: bool = False
    """The client's view of where the partition lives is stale: refresh metadata before retrying."""
    meaning: str = ""
    """What the code means, for messages (empty: the class name says it)."""

    def __init__(self, message: str = "", code: int | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.raw_code = code
        else:
            self.raw_code = int(self.code)


class UnknownError(BrokerError):
    code = ErrorCode.UNKNOWN


class OffsetOutOfRange(BrokerError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class InvalidMessage(BrokerError):
    """Code 2. From a fetch: the broker's copy is corrupt on its disk (it failed its CRC check
    there) and is not served; the partition cannot be read past it until an operator repairs
    it (``rill-broker --verify-logs``) or the reader seeks past it."""

    code = ErrorCode.INVALID_MESSAGE
    meaning = "the message failed its CRC or framing check (from a fetch: it is corrupt on the broker's disk)"


class WrongPartition(BrokerError):
    code = ErrorCode.WRONG_PARTITION
    invalid_metadata = True


class InvalidFetchSize(BrokerError):
    code = ErrorCode.INVALID_FETCH_SIZE


class MessageTooLarge(BrokerError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTopic(BrokerError):
    code = ErrorCode.INVALID_TOPIC


class InvalidOffset(BrokerError):
    code = ErrorCode.INVALID_OFFSET


class UnknownTopic(BrokerError):
    code = ErrorCode.UNKNOWN_TOPIC
    invalid_metadata = True
    retriable = True


class RequestTimedOut(BrokerError):
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True


class StorageError(BrokerError):
    code = ErrorCode.STORAGE_ERROR


class InvalidRequest(BrokerError):
    code = ErrorCode.INVALID_REQUEST


class InvalidPartitions(BrokerError):
    code = ErrorCode.INVALID_PARTITIONS


class PartitionLimitReached(BrokerError):
    code = ErrorCode.PARTITION_LIMIT_REACHED


class NotLeaderForPartition(BrokerError):
    """Code 14. The broker is not the partition's leader (a follower, or leadership moved):
    nothing was written or read; refresh metadata and go to the leader."""

    code = ErrorCode.NOT_LEADER_FOR_PARTITION
    invalid_metadata = True
    retriable = True
    meaning = "this broker is not the leader of the partition (refresh metadata)"


class NotEnoughReplicas(BrokerError):
    """Code 15. An ``acks=all`` produce found fewer in-sync replicas than
    ``min.insync.replicas``: nothing was written, so a retry cannot duplicate."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True
    meaning = "fewer in-sync replicas than min.insync.replicas: nothing was written"


class NotEnoughReplicasAfterAppend(BrokerError):
    """Code 16. The messages were appended, but the in-sync replicas fell below
    ``min.insync.replicas`` before they were committed: a retry may duplicate them."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True
    meaning = "appended, but the in-sync replicas fell below min.insync.replicas (a retry may duplicate)"


class FencedLeaderEpoch(BrokerError):
    """Code 17. The request carried an older leader epoch than the broker's (the requester is stale)."""

    code = ErrorCode.FENCED_LEADER_EPOCH
    invalid_metadata = True
    retriable = True


class UnknownLeaderEpoch(BrokerError):
    """Code 18. The request carried a newer leader epoch than the broker's (the broker is stale)."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    invalid_metadata = True
    retriable = True


class OffsetNotAvailable(BrokerError):
    """Code 19. A new leader's high watermark has not yet reached the start of its epoch, so
    "latest" is not known yet (Kafka's KIP-207): ask again shortly."""

    code = ErrorCode.OFFSET_NOT_AVAILABLE
    retriable = True


class InvalidReplicationFactor(BrokerError):
    """Code 20. A replication factor below 1 or above the number of live brokers."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR
    meaning = ("a replication factor below 1 or above the live brokers (for a topic the broker creates: "
               "its default.replication.factor)")


class LeaderNotAvailable(BrokerError):
    """Code 21. The partition has no leader yet: its replicated topic is being created (the
    broker auto-created it, Kafka's LEADER_NOT_AVAILABLE) or the controller has not told this
    broker its leaders. Nothing was written; refresh metadata and retry."""

    code = ErrorCode.LEADER_NOT_AVAILABLE
    invalid_metadata = True
    retriable = True
    meaning = "the partition has no leader yet (a topic being created): nothing was written; refresh metadata"


class UnsupportedSaslMechanism(BrokerError):
    """Code 22. The listener does not offer the SASL mechanism the client asked for (the
    response names those it does)."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    meaning = "the listener does not offer that SASL mechanism"


class IllegalSaslState(BrokerError):
    """Code 23. A request out of SASL's order: anything but SASL_HANDSHAKE before a client has
    authenticated on a SASL listener, a handshake on a listener without SASL, or a second one.
    The broker closes the connection after answering."""

    code = ErrorCode.ILLEGAL_SASL_STATE
    meaning = "a request out of order for SASL (a SASL listener takes nothing before authentication)"


class SaslAuthenticationFailed(BrokerError):
    """Code 24. Authentication failed: an unknown user or a wrong password (the broker does not
    say which). The broker closes the connection after answering."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    meaning = "authentication failed: wrong user name or password"


class AuthorizationFailed(BrokerError):
    """The principal may not do that (an ACL refused it). Never retriable: an operator must grant it."""


class TopicAuthorizationFailed(AuthorizationFailed):
    """Code 25. The principal may not do that to the topic (Read, Write, Describe, Create, ...)."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    meaning = "not authorized to access the topic (ACLs)"


class GroupAuthorizationFailed(AuthorizationFailed):
    """Code 26. The principal may not do that to the consumer group."""

    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    meaning = "not authorized to access the group (ACLs)"


class ClusterAuthorizationFailed(AuthorizationFailed):
    """Code 27. The principal may not do that to the cluster (create topics, alter ACLs, ...)."""

    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    meaning = "not authorized for that cluster operation (ACLs)"


class CorruptMessageError(RillError):
    """A message read from a broker failed its CRC or framing check; never delivered."""


class ConnectionClosed(RillError):
    """The peer closed the connection (or it broke) before a whole response arrived."""


class AuthenticationFailed(ConnectionClosed):
    """Setting up a secure connection failed: the TLS handshake (a certificate refused, a listener
    that is not TLS) or SASL (a wrong password, a mechanism the listener does not offer). The
    message says which; retrying with the same settings fails the same way."""


_BY_CODE: dict[int, type[BrokerError]] = {
    int(cls.code): cls
    for cls in (
        UnknownError, OffsetOutOfRange, InvalidMessage, WrongPartition, InvalidFetchSize,
        MessageTooLarge, InvalidTopic, InvalidOffset, UnknownTopic, RequestTimedOut,
        StorageError, InvalidRequest, InvalidPartitions, PartitionLimitReached, NotLeaderForPartition,
        NotEnoughReplicas, NotEnoughReplicasAfterAppend, FencedLeaderEpoch, UnknownLeaderEpoch,
        OffsetNotAvailable, InvalidReplicationFactor, LeaderNotAvailable, UnsupportedSaslMechanism,
        IllegalSaslState, SaslAuthenticationFailed, TopicAuthorizationFailed, GroupAuthorizationFailed,
        ClusterAuthorizationFailed,
    )
}


def error_for_code(code: int, message: str = "") -> BrokerError:
    """Return the exception for a wire error code (never raises; unknown codes give UnknownError)."""
    cls = _BY_CODE.get(code, UnknownError)
    default = f"{cls.__name__} (error code {code})" + (f": {cls.meaning}" if cls.meaning else "")
    return cls(message or default, code=code)

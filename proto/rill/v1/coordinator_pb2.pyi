from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorCode]
    UNKNOWN: _ClassVar[ErrorCode]
    GROUP_NOT_FOUND: _ClassVar[ErrorCode]
    GROUP_ALREADY_EXISTS: _ClassVar[ErrorCode]
    GROUP_NOT_EMPTY: _ClassVar[ErrorCode]
    GROUP_IS_EPHEMERAL: _ClassVar[ErrorCode]
    INVALID_GROUP_NAME: _ClassVar[ErrorCode]
    INVALID_SESSION_TIMEOUT: _ClassVar[ErrorCode]
    INVALID_ASSIGNMENT_STRATEGY: _ClassVar[ErrorCode]
    UNKNOWN_MEMBER: _ClassVar[ErrorCode]
    ILLEGAL_GENERATION: _ClassVar[ErrorCode]
    REBALANCE_IN_PROGRESS: _ClassVar[ErrorCode]
    NOT_COORDINATOR: _ClassVar[ErrorCode]
    UNKNOWN_TOPIC_OR_PARTITION: _ClassVar[ErrorCode]
    OFFSET_OUT_OF_RANGE: _ClassVar[ErrorCode]
    INVALID_OFFSET: _ClassVar[ErrorCode]
    NOT_OWNER: _ClassVar[ErrorCode]
    PARTITION_ALREADY_CLAIMED: _ClassVar[ErrorCode]
    REBALANCE_TIMEOUT: _ClassVar[ErrorCode]
    STORAGE_ERROR: _ClassVar[ErrorCode]
    INVALID_REQUEST: _ClassVar[ErrorCode]
    INVALID_TOPIC: _ClassVar[ErrorCode]
    INVALID_PARTITIONS: _ClassVar[ErrorCode]
    PARTITION_LIMIT_REACHED: _ClassVar[ErrorCode]
    INVALID_REPLICATION_FACTOR: _ClassVar[ErrorCode]
    TOPIC_ALREADY_EXISTS: _ClassVar[ErrorCode]
    INVALID_CONFIG: _ClassVar[ErrorCode]
    NOT_CONTROLLER: _ClassVar[ErrorCode]
    ELECTION_NOT_NEEDED: _ClassVar[ErrorCode]
    PREFERRED_LEADER_NOT_AVAILABLE: _ClassVar[ErrorCode]
    REQUEST_TIMED_OUT: _ClassVar[ErrorCode]
    REASSIGNMENT_IN_PROGRESS: _ClassVar[ErrorCode]
    TOPIC_DELETION_DISABLED: _ClassVar[ErrorCode]
    TOPIC_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    GROUP_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]
    CLUSTER_AUTHORIZATION_FAILED: _ClassVar[ErrorCode]

class RewindTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OFFSET: _ClassVar[RewindTarget]
    EARLIEST: _ClassVar[RewindTarget]
    LATEST: _ClassVar[RewindTarget]
    TIMESTAMP: _ClassVar[RewindTarget]
NONE: ErrorCode
UNKNOWN: ErrorCode
GROUP_NOT_FOUND: ErrorCode
GROUP_ALREADY_EXISTS: ErrorCode
GROUP_NOT_EMPTY: ErrorCode
GROUP_IS_EPHEMERAL: ErrorCode
INVALID_GROUP_NAME: ErrorCode
INVALID_SESSION_TIMEOUT: ErrorCode
INVALID_ASSIGNMENT_STRATEGY: ErrorCode
UNKNOWN_MEMBER: ErrorCode
ILLEGAL_GENERATION: ErrorCode
REBALANCE_IN_PROGRESS: ErrorCode
NOT_COORDINATOR: ErrorCode
UNKNOWN_TOPIC_OR_PARTITION: ErrorCode
OFFSET_OUT_OF_RANGE: ErrorCode
INVALID_OFFSET: ErrorCode
NOT_OWNER: ErrorCode
PARTITION_ALREADY_CLAIMED: ErrorCode
REBALANCE_TIMEOUT: ErrorCode
STORAGE_ERROR: ErrorCode
INVALID_REQUEST: ErrorCode
INVALID_TOPIC: ErrorCode
INVALID_PARTITIONS: ErrorCode
PARTITION_LIMIT_REACHED: ErrorCode
INVALID_REPLICATION_FACTOR: ErrorCode
TOPIC_ALREADY_EXISTS: ErrorCode
INVALID_CONFIG: ErrorCode
NOT_CONTROLLER: ErrorCode
ELECTION_NOT_NEEDED: ErrorCode
PREFERRED_LEADER_NOT_AVAILABLE: ErrorCode
REQUEST_TIMED_OUT: ErrorCode
REASSIGNMENT_IN_PROGRESS: ErrorCode
TOPIC_DELETION_DISABLED: ErrorCode
TOPIC_AUTHORIZATION_FAILED: ErrorCode
GROUP_AUTHORIZATION_FAILED: ErrorCode
CLUSTER_AUTHORIZATION_FAILED: ErrorCode
OFFSET: RewindTarget
EARLIEST: RewindTarget
LATEST: RewindTarget
TIMESTAMP: RewindTarget

class Broker(_message.Message):
    __slots__ = ("broker_id", "host", "port", "grpc_port")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    GRPC_PORT_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    host: str
    port: int
    grpc_port: int
    def __init__(self, broker_id: _Optional[int] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., grpc_port: _Optional[int] = ...) -> None: ...

class TopicPartition(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "error_code")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    error_code: ErrorCode
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "session_timeout", "topics", "assignment_strategy", "ephemeral", "rebalance_timeout")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    session_timeout: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    assignment_strategy: str
    ephemeral: bool
    rebalance_timeout: int
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., session_timeout: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., assignment_strategy: _Optional[str] = ..., ephemeral: _Optional[bool] = ..., rebalance_timeout: _Optional[int] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("consumer_group", "error_code", "coordinator")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    error_code: ErrorCode
    coordinator: Broker
    def __init__(self, consumer_group: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., coordinator: _Optional[_Union[Broker, _Mapping]] = ...) -> None: ...

class DeleteGroupRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupResponse(_message.Message):
    __slots__ = ("deleted_consumer_groups", "error_code", "errors")
    DELETED_CONSUMER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    deleted_consumer_groups: _containers.RepeatedScalarFieldContainer[str]
    error_code: ErrorCode
    errors: _containers.RepeatedCompositeFieldContainer[GroupError]
    def __init__(self, deleted_consumer_groups: _Optional[_Iterable[str]] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., errors: _Optional[_Iterable[_Union[GroupError, _Mapping]]] = ...) -> None: ...

class GroupError(_message.Message):
    __slots__ = ("consumer_group", "error_code")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    error_code: ErrorCode
    def __init__(self, consumer_group: _Optional[str] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("client_id", "consumer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., consumer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class GroupInfo(_message.Message):
    __slots__ = ("group_name", "group_members", "topics", "controller_broker", "session_timeout", "error_code", "state", "generation", "assignment_strategy", "ephemeral")
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    GROUP_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_BROKER_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    group_members: _containers.RepeatedScalarFieldContainer[str]
    topics: _containers.RepeatedScalarFieldContainer[str]
    controller_broker: Broker
    session_timeout: int
    error_code: ErrorCode
    state: str
    generation: int
    assignment_strategy: str
    ephemeral: bool
    def __init__(self, group_name: _Optional[str] = ..., group_members: _Optional[_Iterable[str]] = ..., topics: _Optional[_Iterable[str]] = ..., controller_broker: _Optional[_Union[Broker, _Mapping]] = ..., session_timeout: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., state: _Optional[str] = ..., generation: _Optional[int] = ..., assignment_strategy: _Optional[str] = ..., ephemeral: _Optional[bool] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("client_id", "groups_info", "error_code")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    GROUPS_INFO_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    groups_info: _containers.RepeatedCompositeFieldContainer[GroupInfo]
    error_code: ErrorCode
    def __init__(self, client_id: _Optional[str] = ..., groups_info: _Optional[_Iterable[_Union[GroupInfo, _Mapping]]] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class RegisterConsumerRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "consumer_id", "topics", "static_partitions", "session_timeout")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    STATIC_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    consumer_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    static_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    session_timeout: int
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., consumer_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., static_partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ..., session_timeout: _Optional[int] = ...) -> None: ...

class RegisterConsumerResponse(_message.Message):
    __slots__ = ("client_id", "consumer_group", "partitions_to_own", "error_code", "consumer_id", "generation", "session_timeout")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_TO_OWN_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    partitions_to_own: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    error_code: ErrorCode
    consumer_id: str
    generation: int
    session_timeout: int
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., partitions_to_own: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ..., consumer_id: _Optional[str] = ..., generation: _Optional[int] = ..., session_timeout: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "consumer_id", "generation")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    consumer_id: str
    generation: int
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., consumer_id: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("controller_generation", "error_code")
    CONTROLLER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    controller_generation: int
    error_code: ErrorCode
    def __init__(self, controller_generation: _Optional[int] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class RewindConsumerRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "new_offsets", "target", "timestamp", "dry_run")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    NEW_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    new_offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    target: RewindTarget
    timestamp: int
    dry_run: bool
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., new_offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ..., target: _Optional[_Union[RewindTarget, str]] = ..., timestamp: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class RewindConsumerResponse(_message.Message):
    __slots__ = ("consumer_group", "actual_offsets", "error_code")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    actual_offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    error_code: ErrorCode
    def __init__(self, consumer_group: _Optional[str] = ..., actual_offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ..., error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

class CommitOffsetsRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "consumer_id", "generation", "offsets")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    consumer_id: str
    generation: int
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., consumer_id: _Optional[str] = ..., generation: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class CommitOffsetsResponse(_message.Message):
    __slots__ = ("error_code", "offsets")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class FetchOffsetsRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "partitions")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartition]
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartition, _Mapping]]] = ...) -> None: ...

class FetchOffsetsResponse(_message.Message):
    __slots__ = ("error_code", "offsets")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "consumer_id")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    consumer_id: str
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., consumer_id: _Optional[str] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code",)
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    error_code: ErrorCode
    def __init__(self, error_code: _Optional[_Union[ErrorCode, str]] = ...) -> None: ...

from rill.v1 import coordinator_pb2 as _coordinator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "partitions", "replication_factor", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: int
    replication_factor: int
    config: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "topic")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    topic: TopicDescription
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., topic: _Optional[_Union[TopicDescription, _Mapping]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicDescription]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicDescription, _Mapping]]] = ...) -> None: ...

class DescribeTopicsRequest(_message.Message):
    __slots__ = ("topics", "under_replicated_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    under_replicated_only: bool
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., under_replicated_only: _Optional[bool] = ...) -> None: ...

class PartitionDescription(_message.Message):
    __slots__ = ("partition", "start_offset", "end_offset", "size_bytes", "leader", "broker_partition", "replicas", "isr", "leader_epoch", "under_replicated")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    BROKER_PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    partition: int
    start_offset: int
    end_offset: int
    size_bytes: int
    leader: int
    broker_partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader_epoch: int
    under_replicated: bool
    def __init__(self, partition: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., size_bytes: _Optional[int] = ..., leader: _Optional[int] = ..., broker_partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader_epoch: _Optional[int] = ..., under_replicated: _Optional[bool] = ...) -> None: ...

class TopicDescription(_message.Message):
    __slots__ = ("topic", "partition_count", "partitions", "error_code", "replication_factor", "config")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_COUNT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition_count: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionDescription]
    error_code: _coordinator_pb2.ErrorCode
    replication_factor: int
    config: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., partition_count: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionDescription, _Mapping]]] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., replication_factor: _Optional[int] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DescribeTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicDescription]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicDescription, _Mapping]]] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GroupCoordinatorAssignment(_message.Message):
    __slots__ = ("consumer_group", "coordinator_broker_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    coordinator_broker_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., coordinator_broker_id: _Optional[int] = ...) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("brokers", "controller_broker_id", "coordinators")
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATORS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.Broker]
    controller_broker_id: int
    coordinators: _containers.RepeatedCompositeFieldContainer[GroupCoordinatorAssignment]
    def __init__(self, brokers: _Optional[_Iterable[_Union[_coordinator_pb2.Broker, _Mapping]]] = ..., controller_broker_id: _Optional[int] = ..., coordinators: _Optional[_Iterable[_Union[GroupCoordinatorAssignment, _Mapping]]] = ...) -> None: ...

class DescribeGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class MemberDescription(_message.Message):
    __slots__ = ("consumer_id", "client_id", "assignment", "static_partitions", "topics", "last_heartbeat_ms")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    STATIC_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: str
    client_id: str
    assignment: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicPartition]
    static_partitions: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicPartition]
    topics: _containers.RepeatedScalarFieldContainer[str]
    last_heartbeat_ms: int
    def __init__(self, consumer_id: _Optional[str] = ..., client_id: _Optional[str] = ..., assignment: _Optional[_Iterable[_Union[_coordinator_pb2.TopicPartition, _Mapping]]] = ..., static_partitions: _Optional[_Iterable[_Union[_coordinator_pb2.TopicPartition, _Mapping]]] = ..., topics: _Optional[_Iterable[str]] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset", "end_offset", "lag_bytes", "lag_seconds", "owner")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    end_offset: int
    lag_bytes: int
    lag_seconds: float
    owner: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., owner: _Optional[str] = ...) -> None: ...

class DescribeGroupResponse(_message.Message):
    __slots__ = ("error_code", "consumer_group", "state", "generation", "assignment_strategy", "ephemeral", "session_timeout", "topics", "members", "partitions", "coordinator")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    consumer_group: str
    state: str
    generation: int
    assignment_strategy: str
    ephemeral: bool
    session_timeout: int
    topics: _containers.RepeatedScalarFieldContainer[str]
    members: _containers.RepeatedCompositeFieldContainer[MemberDescription]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    coordinator: _coordinator_pb2.Broker
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., consumer_group: _Optional[str] = ..., state: _Optional[str] = ..., generation: _Optional[int] = ..., assignment_strategy: _Optional[str] = ..., ephemeral: _Optional[bool] = ..., session_timeout: _Optional[int] = ..., topics: _Optional[_Iterable[str]] = ..., members: _Optional[_Iterable[_Union[MemberDescription, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ..., coordinator: _Optional[_Union[_coordinator_pb2.Broker, _Mapping]] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("topic_partitions", "all_topics", "timeout_ms")
    TOPIC_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    ALL_TOPICS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    all_topics: bool
    timeout_ms: int
    def __init__(self, topic_partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., all_topics: _Optional[bool] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class PartitionElectionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "leader")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    leader: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., leader: _Optional[int] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    controller: _coordinator_pb2.Broker
    results: _containers.RepeatedCompositeFieldContainer[PartitionElectionResult]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., controller: _Optional[_Union[_coordinator_pb2.Broker, _Mapping]] = ..., results: _Optional[_Iterable[_Union[PartitionElectionResult, _Mapping]]] = ...) -> None: ...

class AlterTopicConfigRequest(_message.Message):
    __slots__ = ("topic", "set_config", "delete_config")
    class SetConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SET_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DELETE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    topic: str
    set_config: _containers.ScalarMap[str, str]
    delete_config: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., set_config: _Optional[_Mapping[str, str]] = ..., delete_config: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterTopicConfigResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "previous", "config")
    class PreviousEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    previous: _containers.ScalarMap[str, str]
    config: _containers.ScalarMap[str, str]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., previous: _Optional[_Mapping[str, str]] = ..., config: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PartitionReassignment(_message.Message):
    __slots__ = ("topic", "partition", "replicas")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class AlterPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("reassignments", "timeout_ms")
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    reassignments: _containers.RepeatedCompositeFieldContainer[PartitionReassignment]
    timeout_ms: int
    def __init__(self, reassignments: _Optional[_Iterable[_Union[PartitionReassignment, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ReassignmentResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    controller: _coordinator_pb2.Broker
    results: _containers.RepeatedCompositeFieldContainer[ReassignmentResult]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., controller: _Optional[_Union[_coordinator_pb2.Broker, _Mapping]] = ..., results: _Optional[_Iterable[_Union[ReassignmentResult, _Mapping]]] = ...) -> None: ...

class ListPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class OngoingReassignment(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "adding_replicas", "removing_replicas", "isr", "leader")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    isr: _containers.RepeatedScalarFieldContainer[int]
    leader: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., isr: _Optional[_Iterable[int]] = ..., leader: _Optional[int] = ...) -> None: ...

class ListPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller", "reassignments", "throttle_bytes_per_second")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    controller: _coordinator_pb2.Broker
    reassignments: _containers.RepeatedCompositeFieldContainer[OngoingReassignment]
    throttle_bytes_per_second: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., controller: _Optional[_Union[_coordinator_pb2.Broker, _Mapping]] = ..., reassignments: _Optional[_Iterable[_Union[OngoingReassignment, _Mapping]]] = ..., throttle_bytes_per_second: _Optional[int] = ...) -> None: ...

class AlterReplicationThrottleRequest(_message.Message):
    __slots__ = ("bytes_per_second",)
    BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    bytes_per_second: int
    def __init__(self, bytes_per_second: _Optional[int] = ...) -> None: ...

class AlterReplicationThrottleResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller", "previous")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    controller: _coordinator_pb2.Broker
    previous: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., controller: _Optional[_Union[_coordinator_pb2.Broker, _Mapping]] = ..., previous: _Optional[int] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic", "timeout_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    timeout_ms: int
    def __init__(self, topic: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "replicated", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPLICATED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    replicated: bool
    partitions: int
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., replicated: _Optional[bool] = ..., partitions: _Optional[int] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topic", "count", "timeout_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    count: int
    timeout_ms: int
    def __init__(self, topic: _Optional[str] = ..., count: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class NewPartition(_message.Message):
    __slots__ = ("partition", "replicas")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: _coordinator_pb2.ErrorCode
    error_message: str
    controller: _coordinator_pb2.Broker
    partitions: _containers.RepeatedCompositeFieldContainer[NewPartition]
    def __init__(self, error_code: _Optional[_Union[_coordinator_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., controller: _Optional[_Union[_coordinator_pb2.Broker, _Mapping]] = ..., partitions: _Optional[_Iterable[_Union[NewPartition, _Mapping]]] = ...) -> None: ...

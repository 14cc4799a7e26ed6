from rill.v1 import coordinator_pb2 as _coordinator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReplicaControlError(_message.Message):
    __slots__ = ()
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NONE: _ClassVar[ReplicaControlError.Code]
        STALE_CONTROLLER_EPOCH: _ClassVar[ReplicaControlError.Code]
        NOT_CONTROLLER: _ClassVar[ReplicaControlError.Code]
        STALE_BROKER_EPOCH: _ClassVar[ReplicaControlError.Code]
        BROKER_NOT_AVAILABLE: _ClassVar[ReplicaControlError.Code]
        REQUEST_TIMED_OUT: _ClassVar[ReplicaControlError.Code]
        UNKNOWN: _ClassVar[ReplicaControlError.Code]
    NONE: ReplicaControlError.Code
    STALE_CONTROLLER_EPOCH: ReplicaControlError.Code
    NOT_CONTROLLER: ReplicaControlError.Code
    STALE_BROKER_EPOCH: ReplicaControlError.Code
    BROKER_NOT_AVAILABLE: ReplicaControlError.Code
    REQUEST_TIMED_OUT: ReplicaControlError.Code
    UNKNOWN: ReplicaControlError.Code
    def __init__(self) -> None: ...

class PartitionLeadership(_message.Message):
    __slots__ = ("topic", "partition", "leader", "leader_epoch", "isr", "replicas", "zk_version", "min_insync_replicas", "adding_replicas", "removing_replicas", "log_settings")
    class LogSettingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ISR_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ZK_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIN_INSYNC_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    REMOVING_REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LOG_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: _containers.RepeatedScalarFieldContainer[int]
    replicas: _containers.RepeatedScalarFieldContainer[int]
    zk_version: int
    min_insync_replicas: int
    adding_replicas: _containers.RepeatedScalarFieldContainer[int]
    removing_replicas: _containers.RepeatedScalarFieldContainer[int]
    log_settings: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., isr: _Optional[_Iterable[int]] = ..., replicas: _Optional[_Iterable[int]] = ..., zk_version: _Optional[int] = ..., min_insync_replicas: _Optional[int] = ..., adding_replicas: _Optional[_Iterable[int]] = ..., removing_replicas: _Optional[_Iterable[int]] = ..., log_settings: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LeaderAndIsrRequest(_message.Message):
    __slots__ = ("controller_id", "controller_epoch", "partitions", "live_brokers", "full", "replication_throttle_bytes_per_second")
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    LIVE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_THROTTLE_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    controller_id: int
    controller_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLeadership]
    live_brokers: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.Broker]
    full: bool
    replication_throttle_bytes_per_second: int
    def __init__(self, controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionLeadership, _Mapping]]] = ..., live_brokers: _Optional[_Iterable[_Union[_coordinator_pb2.Broker, _Mapping]]] = ..., full: _Optional[bool] = ..., replication_throttle_bytes_per_second: _Optional[int] = ...) -> None: ...

class PartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "code")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    code: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., code: _Optional[int] = ...) -> None: ...

class LeaderAndIsrResponse(_message.Message):
    __slots__ = ("error", "partitions")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error: ReplicaControlError.Code
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionResult]
    def __init__(self, error: _Optional[_Union[ReplicaControlError.Code, str]] = ..., partitions: _Optional[_Iterable[_Union[PartitionResult, _Mapping]]] = ...) -> None: ...

class ControlledShutdownRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ...) -> None: ...

class ControlledShutdownResponse(_message.Message):
    __slots__ = ("error", "remaining", "controller_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    error: ReplicaControlError.Code
    remaining: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicPartition]
    controller_id: int
    def __init__(self, error: _Optional[_Union[ReplicaControlError.Code, str]] = ..., remaining: _Optional[_Iterable[_Union[_coordinator_pb2.TopicPartition, _Mapping]]] = ..., controller_id: _Optional[int] = ...) -> None: ...

class LeaveIsrRequest(_message.Message):
    __slots__ = ("broker_id", "broker_epoch", "partitions")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicPartition]
    def __init__(self, broker_id: _Optional[int] = ..., broker_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[_coordinator_pb2.TopicPartition, _Mapping]]] = ...) -> None: ...

class LeaveIsrResponse(_message.Message):
    __slots__ = ("error", "remaining", "controller_id")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    error: ReplicaControlError.Code
    remaining: _containers.RepeatedCompositeFieldContainer[_coordinator_pb2.TopicPartition]
    controller_id: int
    def __init__(self, error: _Optional[_Union[ReplicaControlError.Code, str]] = ..., remaining: _Optional[_Iterable[_Union[_coordinator_pb2.TopicPartition, _Mapping]]] = ..., controller_id: _Optional[int] = ...) -> None: ...

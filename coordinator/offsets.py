"""CommitOffsets, FetchOffsets and RewindConsumer: validation and records.

Pure functions of a group (or None), a request and the catalog; they return the
response and the records to persist, and change nothing themselves.

Commits
    With a consumer id (a member): the member must be known (UNKNOWN_MEMBER), send
    the current generation (ILLEGAL_GENERATION; accepted during PREPARING_REBALANCE,
    whose generation is still the current one: seed 003 members commit before they
    re-register), not have rewound partitions it has not re-registered for
    (REBALANCE_IN_PROGRESS: its commit would undo the rewind), and own every
    partition in the current generation (NOT_OWNER per partition). This fences
    zombies: a member paused past its session timeout is unknown or a generation
    behind, and its commits change nothing.
    Without a consumer id (a standalone consumer's ``assign()``, tools, loaders; the
    generation is ignored, Kafka's is -1): accepted under the group name while the
    group has no live member (it is EMPTY, or new); while it has members, every
    partition gets NOT_OWNER, as Kafka refuses a standalone commit to a group that is
    not empty (it answers UNKNOWN_MEMBER_ID): the members own the group's offsets,
    and an outsider's commit would move them under their feet. A commit to a group
    that does not exist creates it (GroupCreated with default settings:
    non-ephemeral, no topics, ``range``, the default session timeout), as Kafka
    does for simple consumers.
    Per partition, after the checks of the whole request, the first that applies:
    UNKNOWN_TOPIC_OR_PARTITION (whoever commits: NOT_OWNER is only ever the answer
    for a partition that exists), NOT_OWNER, then the offset, which must be a
    message boundary in its log (the log end counts): OFFSET_OUT_OF_RANGE /
    INVALID_OFFSET.
    All or nothing: any error sets ``error_code`` (the first partition's error, in
    request order) and commits nothing. For an error of the whole request every
    partition carries that code.

Rewinds
    Every entry is resolved (OFFSET: the entry's offset, checked like a commit;
    EARLIEST / LATEST: the log start / end; TIMESTAMP: ``catalog.offset_for_time``).
    An unknown target, or TIMESTAMP with a time before the epoch (negative: not
    Kafka's -1 / -2 for latest / earliest, which have targets of their own), is
    INVALID_REQUEST for the whole request, with no entries in the response.
    With a target other than OFFSET the entries' offsets are ignored (proto3 cannot
    tell an offset of 0 from "not given"), and an empty entry list means every
    partition of the group's topics, its members' topics and its committed topics.
    All entries move together or none does. The record is OffsetsCommitted with
    ``rewind=True``; replaying it marks the partitions' live owners.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from rill.client.errors import BrokerError
from rill.client.structs import TopicPartition
from rill.client.topic_names import is_valid_topic
from rill.coordinator.topic_catalog import Catalog, error_code_for
from rill.coordinator.group_state import Group
from rill.coordinator.records import GroupCreated, OffsetsCommitted, Record
from rill.v1 import coordinator_pb2 as pb

Entry = tuple[str, int, int]


def _first_error(codes: Iterable[pb.ErrorCode]) -> pb.ErrorCode:
    return next((c for c in codes if c != pb.NONE), pb.NONE)


def _offsets(entries: list[Entry], codes: list[pb.ErrorCode]) -> list[pb.PartitionOffset]:
    return [pb.PartitionOffset(topic=t, partition=p, offset=o, error_code=c) for (t, p, o), c in zip(entries, codes)]


def check_offset(catalog: Catalog, topic: str, partition: int, offset: int) -> pb.ErrorCode:
    """NONE if ``offset`` is a message boundary of the partition, else the error code."""
    try:
        catalog.check_offset(topic, partition, offset)
    except (BrokerError, KeyError) as exc:
        return error_code_for(exc)
    return pb.NONE


def _member_code(group: Group | None, req: pb.CommitOffsetsRequest) -> pb.ErrorCode:
    if group is None:
        return pb.GROUP_NOT_FOUND
    if req.consumer_id not in group.members:
        return pb.UNKNOWN_MEMBER
    if req.generation != group.generation:
        return pb.ILLEGAL_GENERATION
    if req.consumer_id in group.rewind_pending:
        return pb.REBALANCE_IN_PROGRESS
    return pb.NONE


def _ownership_codes(group: Group | None, req: pb.CommitOffsetsRequest, entries: list[Entry]) -> list[pb.ErrorCode]:
    if req.consumer_id:
        assert group is not None
        allowed = set(group.owned(req.consumer_id))
        return [pb.NONE if (t, p) in allowed else pb.NOT_OWNER for t, p, _ in entries]
    outsider = pb.NOT_OWNER if group is not None and group.members else pb.NONE  # a standalone commit
    return [outsider] * len(entries)


def _entry_codes(group: Group | None, req: pb.CommitOffsetsRequest, entries: list[Entry],
                 catalog: Catalog) -> list[pb.ErrorCode]:
    """Per entry, the first error of: UNKNOWN_TOPIC_OR_PARTITION, NOT_OWNER, the offset's own check."""
    checked = [check_offset(catalog, t, p, o) for t, p, o in entries]
    unknown = [c if c == pb.UNKNOWN_TOPIC_OR_PARTITION else pb.NONE for c in checked]
    return [_first_error(codes) for codes in zip(unknown, _ownership_codes(group, req, entries), checked)]


def commit(group: Group | None, req: pb.CommitOffsetsRequest, catalog: Catalog,
           implicit: Callable[[str], GroupCreated]) -> tuple[pb.CommitOffsetsResponse, list[Record]]:
    """Validate a commit; ``implicit(name)`` gives the settings of a group a commit creates."""
    entries = [(o.topic, o.partition, o.offset) for o in req.offsets]
    whole = _member_code(group, req) if req.consumer_id else pb.NONE
    if whole == pb.NONE and group is None and not is_valid_topic(req.consumer_group):
        whole = pb.INVALID_GROUP_NAME
    if whole != pb.NONE:
        return pb.CommitOffsetsResponse(error_code=whole, offsets=_offsets(entries, [whole] * len(entries))), []
    codes = _entry_codes(group, req, entries, catalog)
    error = _first_error(codes)
    if error != pb.NONE or not entries:
        return pb.CommitOffsetsResponse(error_code=error, offsets=_offsets(entries, codes)), []
    records: list[Record] = [] if group is not None else [implicit(req.consumer_group)]
    records.append(OffsetsCommitted(req.consumer_group, tuple(entries)))
    return pb.CommitOffsetsResponse(error_code=pb.NONE, offsets=_offsets(entries, codes)), records


def fetch(group: Group | None, req: pb.FetchOffsetsRequest) -> pb.FetchOffsetsResponse:
    """Committed offsets (-1 where none) of the named partitions, or every committed one."""
    if group is None:
        return pb.FetchOffsetsResponse(error_code=pb.GROUP_NOT_FOUND)
    wanted = [(tp.topic, tp.partition) for tp in req.partitions] or sorted(group.offsets)
    return pb.FetchOffsetsResponse(error_code=pb.NONE, offsets=[
        pb.PartitionOffset(topic=t, partition=p, offset=group.committed(TopicPartition(t, p))) for t, p in wanted])


def _resolve(catalog: Catalog, target: int, entry: Entry, timestamp_ms: int) -> tuple[int, pb.ErrorCode]:
    topic, partition, offset = entry
    try:
        if target == pb.OFFSET:
            catalog.check_offset(topic, partition, offset)
            return offset, pb.NONE
        if target == pb.TIMESTAMP:
            return catalog.offset_for_time(topic, partition, timestamp_ms), pb.NONE
        start, end = catalog.offset_range(topic, partition)
        return (start if target == pb.EARLIEST else end), pb.NONE
    except (BrokerError, KeyError) as exc:
        return offset, error_code_for(exc)


def _rewind_all(group: Group, topics: Mapping[str, int]) -> list[Entry]:
    names = group.topics | group.subscribed_topics() | {t for t, _ in group.offsets}
    return [(t, p, -1) for t in sorted(names) for p in range(topics.get(t, 0))]


def _target_ok(req: pb.RewindConsumerRequest) -> bool:
    """A known target; for TIMESTAMP, a time at or after the epoch (milliseconds, never negative)."""
    if req.target == pb.TIMESTAMP:
        return req.timestamp >= 0
    return req.target in (pb.OFFSET, pb.EARLIEST, pb.LATEST)


def rewind(group: Group | None, req: pb.RewindConsumerRequest,
           catalog: Catalog) -> tuple[pb.RewindConsumerResponse, list[Record]]:
    """Resolve and validate every entry; all move together (one record) or none does."""
    def refused(code: pb.ErrorCode, offsets: list[pb.PartitionOffset] | None = None) -> pb.RewindConsumerResponse:
        return pb.RewindConsumerResponse(consumer_group=req.consumer_group, error_code=code,
                                         actual_offsets=offsets or [])

    if group is None:
        return refused(pb.GROUP_NOT_FOUND), []
    if not _target_ok(req):
        return refused(pb.INVALID_REQUEST), []
    entries = [(o.topic, o.partition, o.offset) for o in req.new_offsets]
    if not entries and req.target != pb.OFFSET:
        entries = _rewind_all(group, catalog.topics())
    if not entries:
        return refused(pb.INVALID_REQUEST), []
    resolved = [_resolve(catalog, req.target, e, req.timestamp) for e in entries]
    moved = [(t, p, offset) for (t, p, _), (offset, _) in zip(entries, resolved)]
    codes = [code for _, code in resolved]
    error = _first_error(codes)
    if error != pb.NONE:
        return refused(error, _offsets(moved, codes)), []
    response = pb.RewindConsumerResponse(consumer_group=req.consumer_group, error_code=pb.NONE,
                                         actual_offsets=_offsets(moved, codes))
    return response, [OffsetsCommitted(group.name, tuple(moved), rewind=True)]

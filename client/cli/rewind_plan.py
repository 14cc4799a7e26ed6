"""Working out a group rewind: the partitions, the target, the offsets (``rill groups rewind`` and ``rill console``).

A :class:`RewindRequest` says which partitions (``scope``: topics, each with some or all
of its partitions; None: every partition of the group, as ``--all-topics``) and where
to (one target: earliest, latest, a byte offset, a time in ms, or a shift by N
messages). :func:`rewind_offsets` turns it into one RewindConsumer call at the group's
coordinator: a dry run (the plan: the coordinator resolves and checks every offset as a
move would, and moves nothing) or the move itself, all or none.

How each target is resolved (as kafka-consumer-groups --reset-offsets):

- earliest, latest, a time: by the coordinator (target EARLIEST, LATEST, TIMESTAMP);
- an offset: here, clamped to each partition's log start and end (a notice says so);
- a shift by N: here, walked N messages on (back when negative) from the committed
  offset on message boundaries (rill.client.cli.message_walk), reading the partitions
  through the data plane (``reads``), clamped to the log.

Blocking: gRPC calls to the coordinator and, for a shift, fetches from the partitions'
brokers, each bounded by ``reads.timeout``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rill.client.cli.common import CliError, info
from rill.client.cli.consume import TopicReader
from rill.client.cli.message_walk import shift_offset
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol.messages import Message
from rill.client.security.client_security import ClientSecurity
from rill.v1 import coordinator_pb2 as pb

__all__ = ["DataPlane", "RewindRequest", "Scope", "data_plane", "refusal", "rewind_offsets"]

Partition = tuple[str, int]
Scope = tuple[tuple[str, tuple[int, ...]], ...]
"""Topics to rewind, each with its partitions (empty: every partition of the topic)."""


@dataclass(frozen=True)
class RewindRequest:
    """Which partitions and where to. Exactly one of the targets is set (the others None or False).

    ``scope`` None: every partition of the group's topics (with ``shift_by``: those with a
    committed offset). ``to_time_ms``: milliseconds since the epoch (a duration is resolved
    to one before this is built). ``shift_by``: messages after the committed offset
    (before it when negative).
    """

    scope: Scope | None
    to_earliest: bool = False
    to_latest: bool = False
    to_offset: int | None = None
    to_time_ms: int | None = None
    shift_by: int | None = None

    def target(self) -> tuple[pb.RewindTarget, int]:
        """The RewindConsumer target and timestamp; OFFSET for an offset or a shift (worked out here)."""
        if self.to_earliest:
            return pb.EARLIEST, 0
        if self.to_latest:
            return pb.LATEST, 0
        if self.to_time_ms is not None:
            return pb.TIMESTAMP, max(0, int(self.to_time_ms))
        return pb.OFFSET, 0


@dataclass(frozen=True)
class DataPlane:
    """Where and how to read the partitions' messages (for a shift): brokers' data-plane addresses."""

    bootstrap: Sequence[tuple[str, int]]
    timeout: float
    security: ClientSecurity | None = None


def data_plane(bootstrap: Sequence[tuple[str, int]], admin: AdminClient, timeout: float,
               security: ClientSecurity | None, *, via_grpc: bool) -> DataPlane:
    """The data plane to read through: ``bootstrap``, and when the coordinator was named by its gRPC address
    (``via_grpc``: ``bootstrap`` may then be an unused default) the brokers the cluster names first."""
    if not via_grpc:
        return DataPlane(list(bootstrap), timeout, security)
    named = [(b.host, b.port) for b in admin.describe_cluster().brokers]
    return DataPlane([*named, *(a for a in bootstrap if a not in named)], timeout, security)


def rewind_offsets(admin: AdminClient, group: str, request: RewindRequest, reads: DataPlane | Callable[[], DataPlane],
                   *, execute: bool, notice: Callable[[str], None] = info) -> pb.RewindConsumerResponse:
    """Plan (``execute`` False: a dry run) or make the rewind ``request`` of ``group`` at its coordinator ``admin``.

    ``reads`` (or a function giving it, called only when needed) is how a shift reads the
    partitions; ``notice`` gets each clamping note (an offset outside a log).

    Returns:
        The coordinator's answer, refusals included (``error_code`` non-zero: nothing moved;
        :func:`refusal` says why).

    Raises:
        CliError: the partitions or offsets cannot be worked out (an unknown topic, a group
            with no topics, nothing committed to shift).
        RillError: a call failed (unreachable, refused by the ACLs).
    """
    target, stamp = request.target()
    if target == pb.OFFSET:
        entries = _offset_entries(request, admin, group, reads, notice)
    else:
        entries = [(t, p, -1) for t, p in _partitions(admin, group, request.scope)] \
            if request.scope is not None else []
    response = admin.rewind(group, entries, target=target, timestamp_ms=stamp, dry_run=not execute)
    if response.error_code == pb.INVALID_REQUEST and not entries:
        raise CliError(f"group {group!r} has no topics or committed offsets: name them with --topic")
    return response


def refusal(response: pb.RewindConsumerResponse) -> str:
    """Why a rewind was refused: each partition's error, else the request's."""
    failed = [f"{o.topic}-{o.partition}: {error_name(o.error_code)}{f' (offset {o.offset})' if o.offset >= 0 else ''}"
              for o in response.actual_offsets if o.error_code]
    return "; ".join(failed) or error_name(response.error_code)


def _partitions(admin: AdminClient, group: str, scope: Scope | None, committed_only: bool = False) -> list[Partition]:
    """The partitions to move: those named, every partition of the topics named, or (None) the group's."""
    if scope is None:
        if committed_only:
            return sorted((o.topic, o.partition) for o in admin.fetch_offsets(group).offsets if o.offset >= 0)
        return sorted(_bounds(admin, group, [])[0])
    whole = [t for t, ps in scope if not ps]
    counts = {d.topic: d.partition_count for d in admin.describe_topics(whole).topics if not d.error_code} \
        if whole else {}
    missing = [t for t in whole if not counts.get(t)]
    if missing:
        raise CliError(f"unknown topic(s): {', '.join(missing)}")
    return sorted({(t, p) for t, ps in scope for p in (ps or range(counts[t]))})


def _bounds(admin: AdminClient, group: str,
            partitions: Sequence[Partition]) -> tuple[dict[Partition, int], dict[Partition, int]]:
    """Log start and end of each partition (of the group's, when none are given), as the coordinator resolves
    EARLIEST and LATEST (dry runs: nothing moves)."""
    entries = [(t, p, -1) for t, p in partitions]
    found = []
    for target in (pb.EARLIEST, pb.LATEST):
        response = admin.rewind(group, entries, target=target, dry_run=True)
        if response.error_code:
            if response.error_code == pb.INVALID_REQUEST and not entries:
                raise CliError(f"group {group!r} has no topics or committed offsets: name them with --topic")
            raise CliError(refusal(response))
        found.append({(o.topic, o.partition): o.offset for o in response.actual_offsets})
    return found[0], found[1]


def _offset_entries(request: RewindRequest, admin: AdminClient, group: str,
                    reads: DataPlane | Callable[[], DataPlane],
                    notice: Callable[[str], None]) -> list[tuple[str, int, int]]:
    """The offsets of ``to_offset`` (clamped to each log, as Kafka) or ``shift_by`` (walked)."""
    shifting = request.shift_by is not None
    partitions = _partitions(admin, group, request.scope, committed_only=shifting)
    if not partitions:
        raise CliError(f"group {group!r} has no committed offsets to shift: name the partitions with --topic")
    starts, ends = _bounds(admin, group, partitions)
    if request.shift_by is None:
        wanted = int(request.to_offset or 0)
        return [(t, p, _clamp(wanted, starts[(t, p)], ends[(t, p)], f"{t}-{p}", notice)) for t, p in partitions]
    committed = {(o.topic, o.partition): o.offset for o in admin.fetch_offsets(group, partitions).offsets}
    missing = [f"{t}-{p}" for t, p in partitions if committed.get((t, p), -1) < 0]
    if missing:
        raise CliError(f"--shift-by moves a committed offset, and group {group!r} has none for {', '.join(missing)} "
                       "(give those --to-earliest, --to-latest or --to-datetime)")
    plane = reads() if callable(reads) else reads
    entries = []
    for topic in sorted({t for t, _ in partitions}):
        with TopicReader(plane.bootstrap, topic, timeout=plane.timeout, security=plane.security) as reader:
            reader.partitions()
            for t, p in partitions:
                if t == topic:
                    log = _PartitionLog(reader, p)
                    entries.append((t, p, shift_offset(log, committed[(t, p)], request.shift_by, starts[(t, p)],
                                                       ends[(t, p)])))
    return entries


def _clamp(offset: int, start: int, end: int, name: str, notice: Callable[[str], None]) -> int:
    if offset > end:
        notice(f"New offset ({offset}) is higher than latest offset for topic partition {name}. Value will be set "
               f"to {end}")
        return end
    if offset < start:
        notice(f"New offset ({offset}) is lower than earliest offset for topic partition {name}. Value will be set "
               f"to {start}")
        return start
    return offset


class _PartitionLog:
    """One partition's reads at its broker, for :func:`~rill.client.cli.message_walk.shift_offset`."""

    def __init__(self, reader: TopicReader, partition: int) -> None:
        self.topic = reader.topic
        self.client, self.number = reader.client(partition)

    def fetch(self, offset: int) -> list[Message]:
        return self.client.fetch(self.topic, self.number, offset)

    def index_at_or_before(self, offset: int) -> int | None:
        entries = self.client.time_index(self.topic, self.number, offset, 1)
        return entries[0][0] if entries else None

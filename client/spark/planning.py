"""Driver-side questions to the brokers: which partitions, which offsets, where to cut.

:class:`Cluster` asks the brokers named by the ``bootstrap`` option (any that answers)
and each partition's leader (rill.client.spark.leaders: one connection per broker,
opened lazily, following a leader that moves) what the readers plan with: the
subscribed topics and their partitions with leaders, each partition's log start and
end (for a replicated partition, its high watermark), the offset of a start time,
whether an offset is a message boundary, and the boundaries the leader reports inside
a range (see rill.client.spark.ranges).

Every problem a user can cause (an unknown topic, an offset outside the log or not
on a message boundary, an unreachable broker, security options the brokers refuse)
raises :class:`SourceOptionError` with a message that says what to change. Every
connection carries the query's security options (rill.client.spark.security_options).
Not thread-safe: one per planning call.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import structlog

from rill.client.client_config import ConfigError, servers
from rill.client.errors import AuthenticationFailed, BrokerError, ConnectionClosed, InvalidOffset, OffsetOutOfRange
from rill.client.protocol import requests as rq
from rill.client.spark.leaders import Leader, LeaderReads
from rill.client.spark.options import EARLIEST, LATEST, OffsetSpec, ReadOptions, SourceOptionError
from rill.client.spark.security_options import client_security
from rill.client.structs import TopicPartition

__all__ = ["Cluster", "Leader", "TopicPartition", "cluster"]

log = structlog.get_logger(__name__)


class Cluster:
    """Metadata and offsets from the brokers reachable through ``bootstrap`` (``host:port[,...]``),
    connecting with the ``security`` settings (client key -> string; empty: PLAINTEXT).

    Every request goes to the partition's leader and follows it when it moves
    (rill.client.spark.leaders); METADATA is asked of any bootstrap address or known
    broker that answers, so planning does not depend on the first address being up.
    """

    def __init__(self, bootstrap: str, timeout: float = 30.0, security: Mapping[str, str] | None = None) -> None:
        try:
            addresses = servers(bootstrap)
        except ValueError as exc:
            raise SourceOptionError(f"option 'bootstrap': {exc}") from None
        try:
            self.security = client_security(security or {})
            """The connections' TLS and SASL (None: PLAINTEXT), for other clients of the same brokers."""
        except ConfigError as exc:
            raise SourceOptionError(str(exc)) from None
        self._bootstrap = addresses
        self.reads = LeaderReads(addresses, timeout=timeout, security=self.security)
        """The partitions' leaders, and reads on them (offsets, index entries, fetches)."""
        self._partitions: dict[str, int] = {}

    def close(self) -> None:
        self.reads.close()

    # ---------------------------------------------------------------- topics

    def partitions(self, opts: ReadOptions, *, must_exist: bool = True) -> list[TopicPartition]:
        """The partitions a read covers: every partition of the subscribed topics, or the assigned ones.

        Raises:
            SourceOptionError: as :meth:`refresh`, or an assigned partition that does not exist.
        """
        topics = self.refresh(opts.subscribe, opts.pattern, must_exist=must_exist)
        if opts.assign is None:
            return [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        for topic, parts in opts.assign.items():
            missing = [p for p in parts if p >= topics.get(topic, 0)]
            if missing:
                raise SourceOptionError(f"option 'assign': {topic!r} has no partition {missing[0]} "
                                        f"({topics.get(topic, 0)} partitions)")
        return [TopicPartition(t, p) for t, parts in opts.assign.items() for p in parts]

    def refresh(self, subscribe: tuple[str, ...], pattern: str | None, *, must_exist: bool = True) -> dict[str, int]:
        """Look up the subscribed topics: partition count by topic, sorted by name.

        Raises:
            SourceOptionError: a topic of ``subscribe`` does not exist (when ``must_exist``),
                or no broker can be reached.
        """
        metadata = self._metadata(subscribe)
        result: dict[str, int] = {}
        matcher = re.compile(pattern) if pattern is not None else None
        for t in sorted(metadata.topics, key=lambda t: t.topic):
            if matcher is not None and not matcher.fullmatch(t.topic):
                continue
            if t.error:
                if must_exist:
                    raise SourceOptionError(f"topic {t.topic!r} does not exist (create it with: rill topics "
                                            f"create --topic {t.topic} --partitions N)")
                continue
            result[t.topic] = t.partitions
        self._partitions.update(result)
        return result

    def _metadata(self, names: tuple[str, ...]) -> rq.Metadata:
        listed = ",".join(f"{host}:{port}" for host, port in self._bootstrap)
        try:
            return self.reads.metadata(names)
        except AuthenticationFailed as exc:
            raise SourceOptionError(f"the brokers of option 'bootstrap' {listed} refused the security options "
                                    f"(kafka.security.protocol, kafka.ssl.*, kafka.sasl.*): {exc}") from exc
        except ConnectionClosed as exc:
            raise SourceOptionError(f"cannot reach a rill broker of option 'bootstrap' {listed}: {exc}") from exc

    @property
    def partition_counts(self) -> dict[str, int]:
        """Partition count by topic, of every topic looked up so far."""
        return dict(self._partitions)

    def grpc_address(self) -> str:
        """``host:port`` of a bootstrap broker's gRPC services (group coordinator, admin)."""
        brokers = self._metadata(()).brokers
        chosen = next((b for b in brokers if (b.host, b.port) in self._bootstrap), brokers[0] if brokers else None)
        if chosen is None:
            raise SourceOptionError("the brokers of option 'bootstrap' named no brokers in their metadata")
        return f"{chosen.host}:{chosen.grpc_port}"

    def leader(self, tp: TopicPartition) -> Leader | None:
        """The leader of ``tp`` as last learned (None: unknown, or no leader alive)."""
        return self.reads.leader(tp)

    # ---------------------------------------------------------------- offsets

    def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, log end offset) of ``tp`` on its leader; for a replicated partition the
        end is the high watermark: what every in-sync replica has, all a read may return."""
        return self.reads.bounds(tp)

    def offset_at_time(self, tp: TopicPartition, time_ms: int) -> int:
        """The offset to start from so that nothing appended at or after ``time_ms`` is missed
        (precision: one time-index interval earlier at most); the log start when everything is newer."""
        offsets = self.reads.offsets_before(tp[0], tp[1], time_ms, 1)
        return offsets[0] if offsets else self.bounds(tp)[0]

    def check_boundary(self, tp: TopicPartition, offset: int, option: str) -> None:
        """Raise SourceOptionError unless ``offset`` is inside the log of ``tp`` and a message boundary."""
        low, high = self.bounds(tp)
        if not low <= offset <= high:
            raise SourceOptionError(f"option {option!r}: offset {offset} of {tp[0]}-{tp[1]} is outside the log "
                                    f"[{low}, {high}] (offsets are byte positions)")
        if offset == high:
            return
        try:
            self.reads.fetch(tp[0], tp[1], offset, 65536)
        except (InvalidOffset, OffsetOutOfRange) as exc:
            raise SourceOptionError(f"option {option!r}: offset {offset} of {tp[0]}-{tp[1]} is not the start of a "
                                    f"message (offsets are byte positions): {exc}") from None

    def resolve(self, spec: OffsetSpec, tp: TopicPartition, option: str,
                bounds: tuple[int, int] | None = None) -> int:
        """The concrete offset ``spec`` gives ``tp`` (earliest and latest resolved), checked."""
        low, high = bounds if bounds is not None else self.bounds(tp)
        wanted = spec.offset_for(*tp)
        if wanted == EARLIEST:
            return low
        if wanted == LATEST:
            return high
        self.check_boundary(tp, wanted, option)
        return wanted

    def check_named_partitions(self, spec: OffsetSpec, topics: dict[str, int], option: str) -> None:
        """Every topic-partition an offsets JSON names must be subscribed and exist."""
        for topic, parts in spec.per_partition.items():
            if topic not in topics:
                raise SourceOptionError(f"option {option!r} names topic {topic!r}, which is not subscribed "
                                        f"(or does not exist)")
            for p in parts:
                if p >= topics[topic]:
                    raise SourceOptionError(f"option {option!r} names partition {p} of {topic!r}, which has "
                                            f"{topics[topic]} partitions")

    def boundaries_near(self, tp: TopicPartition, targets: Sequence[int]) -> list[int]:
        """Message boundaries around each of ``targets``: the index entry at or before it and
        the next one (TIME_INDEX, one small request per target), ascending, without repeats.

        An empty list when the broker cannot tell (logged): the caller then does not cut.
        """
        found: set[int] = set()
        try:
            for target in targets:
                found.update(offset for offset, _ in self.reads.time_index(tp[0], tp[1], target, 2))
        except BrokerError as exc:
            log.warning("spark.boundaries_unavailable", topic=tp[0], partition=tp[1], error=str(exc))
            return []
        return sorted(found)


@contextmanager
def cluster(bootstrap: str, security: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """A :class:`Cluster` (connecting with the ``security`` settings) closed on exit."""
    c = Cluster(bootstrap, security=security)
    try:
        yield c
    finally:
        c.close()

"""A checker in Jepsen's manner (jepsen.tests.kafka) for rill's byte-offset replicated logs.

Producers record every send of a unique value with its outcome (:meth:`History.send`):

- ``ok``: acknowledged with ``acks=all``, at the offset the broker answered;
- ``fail``: definitely not written (NotEnoughReplicas, NotLeaderForPartition: the
  protocol promises "nothing was written" for both, docs/protocol.md);
- ``info``: unknown (a timeout, a broken connection, NotEnoughReplicasAfterAppend, a
  producer's error after retries): the value may be in the log once, or not at all.

Consumers record every ``(partition, offset, value)`` they polled (:meth:`History.read`).
At the end the test reads each partition's final log from its current leader once the
cluster has healed (:func:`read_final_log`) and :func:`check` compares:

- **lost**: an ok value missing from the final log;
- **misplaced**: an ok value present, but not at the offset it was acknowledged at;
- **duplicate**: one value at two offsets (allowed, and counted apart, for info sends and
  sends of a producer that retries by itself; otherwise an error);
- **inconsistent**: a consumer read a value at an offset where the final log holds
  another one (or nothing): a phantom, uncommitted read;
- **out_of_order**: ok values of one producer thread on one partition not in send order;
- **failed_present**: a value whose send definitely failed is in the final log or was
  read (Jepsen's G1a);
- **unknown**: a value in the final log that nobody sent.

"Index" in Jepsen's sense is the position in the list of message starts of the final log;
here offsets are byte positions and every replica answers the same ones, so the checker
compares offsets directly.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from rill.client.simple import SimpleConsumer

OK, FAIL, INFO = "ok", "fail", "info"


@dataclass(frozen=True)
class Send:
    """One send of one unique value, and how it ended."""

    value: bytes
    thread: str        # the producer thread (order is checked per thread and partition)
    seq: int           # this send's position among the thread's sends
    partition: int
    outcome: str       # OK, FAIL or INFO
    offset: int | None = None   # the acknowledged offset (OK only)
    broker: int | None = None   # the broker that answered (when known)
    retried: bool = False       # the client may have sent it more than once
    error: str = ""
    at: float = 0.0             # time.monotonic() when the outcome was known
    started: float = 0.0        # time.monotonic() when the send began


class History:
    """Every send and every read of a run; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sends: list[Send] = []
        self.reads: list[tuple[int, int, bytes]] = []

    def send(self, value: bytes, thread: str, seq: int, partition: int, outcome: str, *, offset: int | None = None,
             broker: int | None = None, retried: bool = False, error: str = "", started: float = 0.0) -> Send:
        assert outcome in (OK, FAIL, INFO), outcome
        assert outcome != OK or offset is not None, "an ok send has an offset"
        record = Send(value, thread, seq, partition, outcome, offset, broker, retried, error, time.monotonic(), started)
        with self._lock:
            self.sends.append(record)
        return record

    def read(self, partition: int, offset: int, value: bytes) -> None:
        with self._lock:
            self.reads.append((partition, offset, value))

    def count(self, outcome: str) -> int:
        with self._lock:
            return sum(1 for s in self.sends if s.outcome == outcome)


def read_final_log(host: str, port: int, topic: str, partition: int, *, timeout: float = 10.0) -> list[tuple[int, bytes]]:
    """Every ``(offset, value)`` of one partition, fetched from ``host:port`` (its leader) from 0 to the end."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    with SimpleConsumer(host, port, timeout=timeout) as consumer:
        for _ in range(1_000_000):
            messages = consumer.fetch(topic, partition, offset, 1 << 20)
            if not messages:
                return out
            out.extend((m.offset, m.value) for m in messages)
            offset = messages[-1].next_offset
    raise AssertionError(f"{topic}-{partition}: the final read did not end")


@dataclass
class Verdict:
    """What :func:`check` found; ``problems()`` lists the safety violations."""

    ok: int = 0
    fail: int = 0
    info: int = 0
    reads: int = 0
    final_messages: int = 0
    info_present: int = 0                 # info sends found in the final log
    lost: list[Send] = field(default_factory=list)
    misplaced: list[tuple[Send, list[int]]] = field(default_factory=list)
    duplicates_allowed: list[tuple[bytes, list[int]]] = field(default_factory=list)
    duplicates: list[tuple[bytes, list[int]]] = field(default_factory=list)
    inconsistent: list[tuple[int, int, bytes, bytes | None]] = field(default_factory=list)
    out_of_order: list[tuple[str, int, list[tuple[int, int]]]] = field(default_factory=list)
    failed_present: list[Send] = field(default_factory=list)
    unknown: list[tuple[int, int, bytes]] = field(default_factory=list)

    def problems(self) -> dict[str, int]:
        found = {"lost": len(self.lost), "misplaced": len(self.misplaced), "duplicate": len(self.duplicates),
                 "inconsistent": len(self.inconsistent), "out_of_order": len(self.out_of_order),
                 "failed_present": len(self.failed_present), "unknown": len(self.unknown)}
        return {k: v for k, v in found.items() if v}

    def summary(self, limit: int = 5) -> str:
        lines = [f"ok={self.ok} fail={self.fail} info={self.info} (info present: {self.info_present}) "
                 f"reads={self.reads} final messages={self.final_messages}; "
                 f"lost={len(self.lost)} misplaced={len(self.misplaced)} duplicate={len(self.duplicates)} "
                 f"(allowed {len(self.duplicates_allowed)}) inconsistent={len(self.inconsistent)} "
                 f"out_of_order={len(self.out_of_order)} failed_present={len(self.failed_present)} "
                 f"unknown={len(self.unknown)}"]

        def show(name: str, items: list) -> None:
            if items:
                lines.append(f"  {name} ({len(items)}), first {min(limit, len(items))}:")
                lines.extend(f"    {item!r}" for item in items[:limit])

        show("lost", self.lost)
        show("misplaced (send, offsets in the final log)", self.misplaced)
        show("duplicate (value, offsets)", self.duplicates)
        show("inconsistent (partition, offset, read value, final value)", self.inconsistent)
        show("out of order (thread, partition, [(seq, offset)])", self.out_of_order)
        show("failed but present", self.failed_present)
        show("unknown (partition, offset, value)", self.unknown)
        return "\n".join(lines)

    def assert_no_loss(self) -> None:
        """Fail with the summary if anything acknowledged was lost or moved, or any other safety check failed."""
        if self.problems():
            raise AssertionError("replication checker: " + self.summary())


def check(history: History, final_logs: dict[int, list[tuple[int, bytes]]]) -> Verdict:
    """Compare a run's history with the final log of every partition (``final_logs[partition]``)."""
    with history._lock:
        sends = list(history.sends)
        reads = list(history.reads)
    v = Verdict(reads=len(reads))
    by_value: dict[bytes, Send] = {}
    for s in sends:
        by_value[s.value] = s
        setattr(v, s.outcome, getattr(v, s.outcome) + 1)
    where: dict[bytes, list[int]] = defaultdict(list)       # value -> offsets in the final log
    at: dict[tuple[int, int], bytes] = {}                    # (partition, offset) -> value
    for partition, log in final_logs.items():
        v.final_messages += len(log)
        for offset, value in log:
            where[value].append(offset)
            at[(partition, offset)] = value
            if value not in by_value:
                v.unknown.append((partition, offset, value))
    for s in sends:
        offsets = where.get(s.value, [])
        if s.outcome == OK:
            if not offsets:
                v.lost.append(s)
            elif s.offset not in offsets:
                v.misplaced.append((s, offsets))
        elif s.outcome == INFO and offsets:
            v.info_present += 1
        elif s.outcome == FAIL and offsets:
            v.failed_present.append(s)
        if len(offsets) > 1:
            (v.duplicates_allowed if s.outcome == INFO or s.retried else v.duplicates).append((s.value, offsets))
    failed = {s.value for s in sends if s.outcome == FAIL}
    seen_failed: set[bytes] = set()
    for partition, offset, value in reads:
        final = at.get((partition, offset))
        if final != value:
            v.inconsistent.append((partition, offset, value, final))
        if value in failed and value not in seen_failed and not where.get(value):
            seen_failed.add(value)
            v.failed_present.append(by_value[value])
    chains: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for s in sends:
        if s.outcome == OK and where.get(s.value):
            chains[(s.thread, s.partition)].append((s.seq, min(where[s.value])))
    for (thread, partition), chain in chains.items():
        chain.sort()
        if any(b[1] <= a[1] for a, b in zip(chain, chain[1:])):
            bad = [(a, b) for a, b in zip(chain, chain[1:]) if b[1] <= a[1]]
            v.out_of_order.append((thread, partition, [x for pair in bad[:3] for x in pair]))
    return v

"""The worker processes of ``rill perf group-failover``: consumer-group members, or the producer.

``python -m rill.client.cli.perf.group_failover_members CONFIG_JSON`` runs one worker,
which the harness (:mod:`rill.client.cli.perf.group_failover`) starts and drives over
its stdin and stdout, one JSON object a line each way: a command in, its answer out.
Its structlog warnings (commit failures, evictions, the producer's retries) go to its
stderr, which the harness sends to a file next to the brokers' logs.

- **members** (``"role": "members"``): for each group of ``groups``, ``members`` threads,
  each a :class:`~rill.client.consumer.Consumer` with that ``group.id`` subscribed to
  ``topic``, in a loop of ``poll(poll_timeout)`` and, after every poll that returned
  messages, a synchronous ``commit(offsets=...)`` of the next offset of the last message
  of each partition the poll returned (what ``commit()`` would commit, but named, so the
  acknowledged offsets are known exactly). A group's members are all in one worker, so
  its record of acknowledged commits is complete there.
- **producer** (``"role": "producer"``): a :class:`~rill.client.producer.Producer`
  (``acks=all``) sending ``rate`` messages a second, to the partitions of ``topic`` in
  turn.

Commands: ``status`` (per member: messages, polls with messages, commits acknowledged and
refused, errors, when it last consumed); ``since`` with ``t`` (per member: when it first
consumed at or after ``t``, ``time.monotonic()`` of this machine, which every process
shares, and its longest gap between consuming in the ``window`` seconds before ``t``);
``acked`` (per group and partition: the highest offset whose commit was acknowledged);
``stop`` (members close and leave their groups; the answer carries the final counts).

**Starts behind an acknowledged commit**: when a member is assigned a partition
(``on_assign``), the group's highest acknowledged commit of that partition is noted; the
first message it then consumes there is where it started, the committed offset its
coordinator handed out. Starting below the noted offset means that commit was lost
(the messages between are consumed again). Every such start is reported.
"""

from __future__ import annotations

import bisect
import collections
import json
import sys
import threading
import time
from typing import Any

import structlog

from rill.client.consumer import Consumer
from rill.client.consumer.errors import MemberEvicted
from rill.client.consumer.subscription import TopicPartition
from rill.client.errors import RillError
from rill.client.logconfig import configure_logging
from rill.client.producer import Producer, SendResponse

__all__ = ["GroupMember", "main"]

log = structlog.get_logger(__name__)

ERROR_PAUSE_S = 0.05  # after a poll that raised: the consumer backs off on its own, this only spares the CPU


class AckedCommits:
    """The highest acknowledged committed offset of every partition of one group; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[int, int] = {}

    def record(self, offsets: dict[int, int]) -> None:
        with self.lock:
            for partition, offset in offsets.items():
                if offset > self.offsets.get(partition, -1):
                    self.offsets[partition] = offset

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.offsets)


class GroupMember(threading.Thread):
    """One consumer of a group in its poll-and-commit loop, on a thread of its own."""

    def __init__(self, config: dict[str, Any], group: str, index: int, acked: AckedCommits) -> None:
        super().__init__(name=f"rill-perf-{group}-{index}", daemon=True)
        self.config = config
        self.group = group
        self.index = index
        self.acked = acked
        self.stopping = threading.Event()
        self.consumed_at: list[float] = []  # monotonic, of every poll that returned messages
        self.committed_at: list[float] = []  # monotonic, of every acknowledged commit
        self.messages = 0
        self.commits = 0
        self.commit_failures: collections.Counter[str] = collections.Counter()
        self.poll_errors: collections.Counter[str] = collections.Counter()
        self.owned = 0
        self.assignments = 0
        self.starts_behind: list[dict[str, Any]] = []
        self._noted: dict[int, int] = {}  # partition -> acknowledged offset when it was assigned
        self.fatal = ""

    def run(self) -> None:
        c = self.config
        try:
            consumer = Consumer(bootstrap_servers=c["bootstrap"], group_id=self.group, enable_auto_commit=False,
                                client_id=f"perf-{self.group}-{self.index}", fetch_max_wait_ms=c["fetch_max_wait_ms"],
                                session_timeout_ms=c["session_timeout_ms"],
                                heartbeat_interval_ms=c["heartbeat_interval_ms"],
                                on_assign=self._assigned, on_revoke=self._revoked)
        except RillError as exc:
            self.fatal = repr(exc)
            return
        try:
            consumer.subscribe([c["topic"]])
            while not self.stopping.is_set():
                self._turn(consumer)
        except BaseException as exc:  # reported in status; the harness fails the run
            self.fatal = repr(exc)
        finally:
            try:
                consumer.close()
            except RillError:
                pass

    def _turn(self, consumer: Consumer) -> None:
        try:
            messages = consumer.poll(self.config["poll_timeout"])
        except MemberEvicted:
            self.poll_errors["MemberEvicted"] += 1
            return
        except RillError as exc:
            self.poll_errors[type(exc).__name__] += 1
            self.stopping.wait(ERROR_PAUSE_S)
            return
        if not messages:
            return
        self.consumed_at.append(time.monotonic())
        self.messages += len(messages)
        ends: dict[int, int] = {}
        for m in messages:
            noted = self._noted.pop(m.partition, None)
            if noted is not None and m.offset < noted:
                self.starts_behind.append({"group": self.group, "partition": m.partition, "started": m.offset,
                                           "acknowledged": noted, "at": time.monotonic()})
                log.warning("perf.start_behind_acknowledged_commit", group=self.group, partition=m.partition,
                            started=m.offset, acknowledged=noted)
            ends[m.partition] = m.next_offset
        try:
            consumer.commit(offsets={(self.config["topic"], p): o for p, o in ends.items()})
        except RillError as exc:
            self.commit_failures[type(exc).__name__] += 1
            return
        self.acked.record(ends)
        self.committed_at.append(time.monotonic())
        self.commits += 1

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.assignments += 1
        self.owned = len(partitions)
        acked = self.acked.snapshot()
        self._noted = {tp.partition: acked[tp.partition] for tp in partitions if tp.partition in acked}

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        self.owned = 0
        self._noted = {}

    def status(self) -> dict[str, Any]:
        times = self.consumed_at
        return {"group": self.group, "member": self.index, "messages": self.messages, "polls_with_messages": len(times),
                "last_consumed": times[-1] if times else None, "commits": self.commits,
                "commit_failures": dict(self.commit_failures), "poll_errors": dict(self.poll_errors),
                "owned": self.owned, "assignments": self.assignments, "starts_behind": len(self.starts_behind),
                "fatal": self.fatal}

    def since(self, t: float, window: float) -> dict[str, Any]:
        """When it first consumed, and first had a commit acknowledged, at or after ``t``; its longest gap
        between polls with messages in the ``window`` s before ``t``."""
        times = self.consumed_at[:]  # appended to by its thread: a copy is a consistent prefix
        at = bisect.bisect_left(times, t)
        first = times[at] if at < len(times) else None
        before = times[bisect.bisect_left(times, t - window):at]
        gap = max((b - a for a, b in zip(before, before[1:])), default=None)
        commits = self.committed_at[:]
        c = bisect.bisect_left(commits, t)
        return {"group": self.group, "member": self.index, "first": first,
                "first_commit": commits[c] if c < len(commits) else None, "gap_before": gap}


class MembersWorker:
    def __init__(self, config: dict[str, Any]) -> None:
        self.acked = {g: AckedCommits() for g in config["groups"]}
        self.members = [GroupMember(config, g, i, self.acked[g]) for g in config["groups"]
                        for i in range(config["members"])]
        for m in self.members:
            m.start()

    def answer(self, command: dict[str, Any]) -> dict[str, Any]:
        cmd = command["cmd"]
        if cmd == "status":
            return {"members": [m.status() for m in self.members]}
        if cmd == "since":
            return {"members": [m.since(float(command["t"]), float(command.get("window", 5.0))) for m in self.members]}
        if cmd == "acked":
            return {"acked": {g: a.snapshot() for g, a in self.acked.items()}}
        if cmd == "stop":
            for m in self.members:
                m.stopping.set()
            for m in self.members:
                m.join(30)
            return {"members": [m.status() for m in self.members],
                    "starts_behind": [s for m in self.members for s in m.starts_behind]}
        raise ValueError(f"unknown command {cmd!r}")


class ProducerWorker:
    """``rate`` acks=all messages a second to the topic's partitions in turn, on a thread."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.sent = 0
        self.failed: collections.Counter[str] = collections.Counter()
        self.acknowledged = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rill-perf-producer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        c = self.config
        payload = b"x" * int(c["message_size"])
        pending: collections.deque[SendResponse] = collections.deque()
        with Producer({"bootstrap.servers": c["bootstrap"], "acks": "all", "linger.ms": 0,
                       "client.id": "rill-perf-group-failover"}) as producer:
            started = time.monotonic()
            while not self.stopping.is_set():
                due = int((time.monotonic() - started) * c["rate"]) - self.sent
                if due <= 0:
                    self.stopping.wait(min(0.01, 1.0 / c["rate"]))
                    self._settle(pending)
                    continue
                for _ in range(due):
                    pending.append(producer.send(c["topic"], payload, partition=self.sent % c["partitions"]))
                    self.sent += 1
            producer.flush(30)
            self._settle(pending)

    def _settle(self, pending: collections.deque[SendResponse]) -> None:
        while pending and pending[0].done():
            error = pending.popleft().get_error(0)
            if error is None:
                self.acknowledged += 1
            else:
                self.failed[type(error).__name__] += 1

    def answer(self, command: dict[str, Any]) -> dict[str, Any]:
        if command["cmd"] == "stop":
            self.stopping.set()
            self.thread.join(60)
        return {"sent": self.sent, "acknowledged": self.acknowledged, "failed": dict(self.failed)}


def main(argv: list[str]) -> int:
    """Run the worker described by ``argv[0]`` (JSON) until stdin closes or says ``stop``."""
    config = json.loads(argv[0])
    configure_logging("warning")
    worker: MembersWorker | ProducerWorker = (MembersWorker(config) if config["role"] == "members"
                                              else ProducerWorker(config))
    for line in sys.stdin:
        command = json.loads(line)
        print(json.dumps(worker.answer(command)), flush=True)
        if command["cmd"] == "stop":
            return 0
    worker.answer({"cmd": "stop"})  # the harness went away: leave the groups anyway
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

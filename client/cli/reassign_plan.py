"""Reassignment plans in ``kafka-reassign-partitions.sh``'s JSON, and proposing one (``--generate``).

A plan (the ``--reassignment-json-file``, and what ``--generate`` prints)::

    {"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3,4]}]}

``replicas`` lists the target replicas, the preferred leader first; Kafka's optional
``log_dirs`` is accepted if every entry is ``"any"`` (rill has one data directory per
broker). The topics to move (``--topics-to-move-json-file``)::

    {"version":1,"topics":[{"topic":"orders"}]}

:func:`propose` places each topic's partitions over the brokers given as Kafka's
``--generate`` does: the rack-unaware rule with a random start (client/replica_spread.py),
the topic's replication factor kept. Pure functions; ``PlanError`` says what is wrong.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from rill.client.replica_spread import spread_replicas

__all__ = ["Move", "PlanError", "parse_plan", "parse_topics", "plan_json", "propose"]

Move = tuple[str, int, tuple[int, ...]]
"""(topic, partition, replicas)."""


class PlanError(ValueError):
    """A plan or topics file that is not what the command expects (the message says why)."""


def _object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PlanError(f"{what} must be a JSON object")
    if value.get("version", 1) != 1:
        raise PlanError(f"{what}: version {value.get('version')!r} is not 1")
    return value


def _int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise PlanError(f"{what} must be a non-negative integer, not {value!r}")
    return value


def parse_plan(text: str) -> list[Move]:
    """A reassignment plan's moves, in file order. Raises PlanError (an empty plan, a partition twice, ...)."""
    value = _object(text, "the reassignment plan")
    entries = value.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise PlanError('the reassignment plan needs a non-empty "partitions" list')
    moves: list[Move] = []
    seen: set[tuple[str, int]] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not entry["topic"]:
            raise PlanError(f"each partition needs a topic, partition and replicas: {entry!r:.80}")
        topic, partition = entry["topic"], _int(entry.get("partition"), f"{entry['topic']}: partition")
        replicas = entry.get("replicas")
        if not isinstance(replicas, list) or not replicas:
            raise PlanError(f"{topic}-{partition}: replicas must be a non-empty list of broker ids")
        ids = tuple(_int(b, f"{topic}-{partition}: a replica") for b in replicas)
        if len(set(ids)) != len(ids):
            raise PlanError(f"{topic}-{partition}: replicas {list(ids)} list a broker twice")
        dirs = entry.get("log_dirs", ["any"] * len(ids))
        if not isinstance(dirs, list) or len(dirs) != len(ids) or any(d != "any" for d in dirs):
            raise PlanError(f"{topic}-{partition}: log_dirs must be \"any\" for every replica (one data directory "
                            "per broker)")
        if (topic, partition) in seen:
            raise PlanError(f"{topic}-{partition} is listed twice")
        seen.add((topic, partition))
        moves.append((topic, partition, ids))
    return moves


def parse_topics(text: str) -> list[str]:
    """The topics of a ``--topics-to-move-json-file``, in file order without repeats. Raises PlanError."""
    value = _object(text, "the topics file")
    entries = value.get("topics")
    if not isinstance(entries, list) or not entries:
        raise PlanError('the topics file needs a non-empty "topics" list')
    topics: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) or not entry["topic"]:
            raise PlanError(f'each entry of "topics" needs a "topic": {entry!r:.80}')
        if entry["topic"] not in topics:
            topics.append(entry["topic"])
    return topics


def plan_json(moves: Sequence[Move]) -> str:
    """Moves as a plan, on one line as Kafka prints it, in (topic, partition) order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for t, p, r in sorted(moves)]}, separators=(",", ":"))


def propose(current: Mapping[str, Sequence[Sequence[int]]], brokers: Sequence[int],
            rng: random.Random | None = None) -> list[Move]:
    """New replicas for every partition of each topic in ``current`` (topic -> replicas per partition) over ``brokers``.

    Raises:
        PlanError: a broker listed twice, or fewer brokers than a topic's replication factor.
    """
    ids = sorted(brokers)
    if len(set(ids)) != len(ids) or not ids:
        raise PlanError(f"the broker list {list(brokers)} must name distinct brokers")
    source = rng or random.Random()
    moves: list[Move] = []
    for topic, replicas in sorted(current.items()):
        factor = len(replicas[0]) if replicas else 0
        if not 1 <= factor <= len(ids):
            raise PlanError(f"topic {topic} has replication factor {factor}: it needs at least that many brokers, "
                            f"not {len(ids)} ({','.join(map(str, ids))})")
        start, shift = source.randrange(len(ids)), source.randrange(len(ids))
        for p, target in enumerate(spread_replicas(ids, len(replicas), factor, start, shift)):
            moves.append((topic, p, target))
    return moves

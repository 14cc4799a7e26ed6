"""The controller's reassignment work: starting moves, completing them, and the replication throttle.

reassignment.py has the rules; this module reads and writes ZooKeeper for them, on the
controller's worker thread, updating the context it is given:

- :func:`start_reassignments` (Admin AlterPartitionReassignments): checks each target,
  writes each topic's node with the union and the adding/removing lists (one
  conditional write per topic, behind the controller's epoch check), then bumps the
  leader epoch of each partition started. The caller sends their roles.
- :func:`resume_reassignments` (a new controller): the same epoch bump for every
  partition whose node says it is moving, so its leader learns the replica set even if
  the previous controller died between the two writes.
- :func:`advance_reassignments` (the controller's periodic check while moves are under
  way): re-reads the moving partitions' states; those whose target replicas are all in
  the ISR get their completing state (a leader in the target, the ISR without the
  replicas leaving, the next epoch), then their topic node lists the target alone.
- :func:`read_throttle`, :func:`write_throttle`: ``/rill/admin/replication_throttle``.

Raises everywhere: ``ControllerMoved`` (the epoch check failed: resign) and kazoo's
``KazooException`` (the outcome of a write in flight is unknown: the controller reloads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError

from rill.broker.cluster.controller_actions import elect_and_write, reread
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import ControllerMoved, PartitionKey
from rill.broker.cluster.reassignment import (Outcome, ReassignmentResult, begin, decide_completion, decide_start,
                                              finish, ready_to_complete, target_problem)
from rill.client.zookeeper.replica_layout import (THROTTLE_PATH, TopicReplicas, decode_throttle, encode_throttle,
                                                  topic_path)

__all__ = ["Asked", "advance_reassignments", "read_throttle", "reassigning", "resume_reassignments",
           "start_reassignments", "write_throttle"]

log = structlog.get_logger(__name__)

Asked = Sequence[tuple[str, int, tuple[int, ...]]]
"""Reassignments asked for: (topic, partition, target replicas)."""

TOPIC_WRITE_ATTEMPTS = 5


def reassigning(ctx: ControllerContext) -> list[PartitionKey]:
    """The partitions being moved, in key order (those with a state)."""
    return sorted((topic, p) for topic, replicas in ctx.topics.items() for p in replicas.adding
                  if (topic, p) in ctx.states)


def start_reassignments(zk: KazooClient, ctx: ControllerContext, asked: Asked,
                        max_attempts: int) -> tuple[list[ReassignmentResult], list[PartitionKey]]:
    """Start the moves ``asked`` (step 1 of reassignment.py).

    Returns:
        (one result per partition asked, in (topic, partition) order; the partitions
        whose state was written, whose roles the caller sends to every live broker).
    """
    results: dict[PartitionKey, ReassignmentResult] = {}
    targets: dict[str, dict[int, tuple[int, ...]]] = {}
    seen: set[PartitionKey] = set()
    for topic, partition, target in asked:
        key = (topic, partition)
        if key in seen:
            results[key] = ReassignmentResult(topic, partition, Outcome.INVALID, "asked twice in one request")
            targets.get(topic, {}).pop(partition, None)
            continue
        seen.add(key)
        problem = target_problem(ctx.topics.get(topic), partition, target, ctx.live)
        if problem is not None:
            results[key] = ReassignmentResult(topic, partition, *problem)
            continue
        targets.setdefault(topic, {})[partition] = target
    started: list[PartitionKey] = []
    for topic, moves in sorted(targets.items()):
        if not moves:
            continue
        try:
            write_topic(zk, ctx, topic, lambda current, moves=moves: begin(current, moves))  # type: ignore[misc]
        except (ValueError, TimeoutError) as exc:
            for p in moves:
                results[(topic, p)] = ReassignmentResult(topic, p, Outcome.FAILED, str(exc))
            continue
        for p, target in sorted(moves.items()):
            results[(topic, p)] = ReassignmentResult(topic, p, Outcome.STARTED)
            started.append((topic, p))
            log.info("controller.reassignment_started", topic=topic, partition=p, target=list(target),
                     replicas=list(ctx.replicas((topic, p))), adding=list(ctx.topics[topic].adding.get(p, ())),
                     removing=list(ctx.topics[topic].removing.get(p, ())), epoch=ctx.epoch.epoch)
    changed = _bump(zk, ctx, started, max_attempts)
    return [results[key] for key in sorted(results)], changed


def resume_reassignments(zk: KazooClient, ctx: ControllerContext, max_attempts: int) -> list[PartitionKey]:
    """A new controller's step 1 again for every partition being moved; returns the partitions written."""
    keys = reassigning(ctx)
    if keys:
        reread(zk, ctx, keys)
        log.info("controller.reassignments_resumed", partitions=len(keys), epoch=ctx.epoch.epoch)
    return _bump(zk, ctx, keys, max_attempts)


def _bump(zk: KazooClient, ctx: ControllerContext, keys: Sequence[PartitionKey], max_attempts: int) -> list[PartitionKey]:
    epoch = ctx.epoch.epoch
    changed, _ = elect_and_write(zk, ctx, keys, lambda key, state: decide_start(state, controller_epoch=epoch),
                                 max_attempts)
    return changed


def advance_reassignments(zk: KazooClient, ctx: ControllerContext,
                          max_attempts: int) -> tuple[list[PartitionKey], list[PartitionKey]]:
    """Complete the moves whose target replicas are all in the ISR (step 2 of reassignment.py).

    Returns:
        (the partitions whose state or assignment changed, to send to every live broker;
        those of them whose move is complete), both in key order.
    """
    keys = reassigning(ctx)
    if not keys:
        return [], []
    reread(zk, ctx, keys)
    ready = [key for key in keys if ready_to_complete(ctx.states[key][0], ctx.topics[key[0]].target(key[1]))]
    if not ready:
        return [], []
    candidates, epoch = ctx.candidates(), ctx.epoch.epoch
    changed, _ = elect_and_write(zk, ctx, ready, lambda key, state: decide_completion(
        state, ctx.topics[key[0]].target(key[1]), candidates, controller_epoch=epoch), max_attempts)
    done: list[PartitionKey] = []
    for topic in sorted({t for t, _ in changed}):
        partitions = [p for t, p in changed if t == topic]
        before = ctx.topics[topic]
        try:
            write_topic(zk, ctx, topic, lambda current, partitions=partitions: finish(current, partitions))  # type: ignore[misc]
        except TimeoutError as exc:
            log.warning("controller.reassignment_write_lost", topic=topic, partitions=partitions, error=str(exc))
            continue
        for p in partitions:
            state = ctx.states[(topic, p)][0]
            log.info("controller.reassignment_completed", topic=topic, partition=p, replicas=list(ctx.replicas((topic, p))),
                     removed=list(before.removing.get(p, ())), leader=state.leader, isr=list(state.isr),
                     leader_epoch=state.leader_epoch, epoch=epoch)
            done.append((topic, p))
    return sorted(changed), sorted(done)


def write_topic(zk: KazooClient, ctx: ControllerContext, topic: str,
                change: Callable[[TopicReplicas], TopicReplicas]) -> TopicReplicas:
    """Rewrite ``topic``'s node as ``change`` makes it from the node's current value, behind the epoch check.

    Another writer (AlterTopicConfig) getting in first makes it read and apply ``change``
    again, up to TOPIC_WRITE_ATTEMPTS times. ``ctx.topics[topic]`` holds the result.

    Raises:
        TimeoutError: every attempt lost to another writer (nothing written).
        ValueError: the node is malformed, or ``change`` refused it.
        ControllerMoved, KazooException: see the module docstring.
    """
    path = topic_path(topic)
    for attempt in range(1, TOPIC_WRITE_ATTEMPTS + 1):
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            raise ValueError(f"topic {topic} was deleted") from None
        new = change(TopicReplicas.decode(data))
        tx = zk.transaction()
        tx.check(ctx.epoch.check.path, ctx.epoch.check.version)
        tx.set_data(path, new.encode(), stat.version)
        epoch_result, write_result = tx.commit()
        if isinstance(epoch_result, Exception) and not isinstance(epoch_result, RolledBackError):
            raise ControllerMoved(f"writing topic {topic}: the controller epoch check failed")
        if isinstance(write_result, BadVersionError):
            log.info("controller.topic_write_lost", topic=topic, attempt=attempt)
            continue
        if isinstance(write_result, Exception):
            raise write_result
        ctx.topics[topic] = new
        return new
    raise TimeoutError(f"topic {topic}: other writers changed its node {TOPIC_WRITE_ATTEMPTS} times in a row")


def read_throttle(zk: KazooClient) -> int:
    """The replication throttle in bytes per second (0: none, or a malformed node, logged)."""
    try:
        data, _ = zk.get(THROTTLE_PATH)
    except NoNodeError:
        return 0
    try:
        return decode_throttle(data)
    except ValueError as exc:
        log.error("controller.throttle_unreadable", error=str(exc))
        return 0


def write_throttle(zk: KazooClient, ctx: ControllerContext, bytes_per_second: int) -> int:
    """Set the throttle (0 removes it) behind the epoch check; returns the previous rate.

    Raises ValueError for a negative rate (nothing written).
    """
    data = encode_throttle(bytes_per_second)
    previous = read_throttle(zk)
    zk.ensure_path(THROTTLE_PATH.rsplit("/", 1)[0])
    tx = zk.transaction()
    tx.check(ctx.epoch.check.path, ctx.epoch.check.version)
    if zk.exists(THROTTLE_PATH) is None:
        tx.create(THROTTLE_PATH, data)
    else:
        tx.set_data(THROTTLE_PATH, data)
    epoch_result, write_result = tx.commit()
    if isinstance(epoch_result, Exception) and not isinstance(epoch_result, RolledBackError):
        raise ControllerMoved("writing the replication throttle: the controller epoch check failed")
    if isinstance(write_result, Exception):
        raise write_result
    ctx.throttle = bytes_per_second
    log.info("controller.throttle_set", bytes_per_second=bytes_per_second, previous=previous, epoch=ctx.epoch.epoch)
    return previous

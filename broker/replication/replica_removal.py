"""Replicas moved away by a reassignment, or of a deleted topic: which ones, and deleting their logs.

When a reassignment completes, the controller sends every broker the partition's role
with its new replicas (reassignment.py). A broker that holds a replica the role no
longer lists stops it (``ReplicaManager._remove``: no leading, no fetching) and deletes
its log. The same holds for a broker that was down at the time: the full LeaderAndIsr it
gets on returning lists the partition without it. A replica is never deleted for being
absent from a request, only for a role that names its partition without it: a
controller that failed to read a topic must not make brokers delete it.

A topic being deleted (topic_deletion.py) takes the same path, as Kafka's
StopReplica(delete=true): the controller sends each of its partitions with no replicas
and leader ``LEADER_DURING_DELETE`` (-2), so every broker holding a replica stops and
deletes it, and every broker forgets the partitions from its metadata. A replica that
could not be deleted is answered ``STORAGE_ERROR`` and the controller asks again.

Deleting is Kafka's two steps: the log is closed and its directory renamed to
``<topic>-<partition>.<ms>.deleted`` at once (``LogManager.delete_replica``: it is gone
from the data directory's replicas, and skipped by a restart), then the renamed
directory is removed on a background thread, so a large log does not hold the
LeaderAndIsr answer (Kafka waits ``file.delete.delay.ms``; rill deletes at once).

Thread-safety: :func:`delete_replicas` runs on the thread applying the roles (never the
event loop), after the loop has dropped the replicas and their fetchers have stopped.
"""

from __future__ import annotations

import glob
import os
import shutil
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import structlog

from rill.broker.replication.replica import PartitionRole, Replica
from rill.client.errors import BrokerError

__all__ = ["delete_replicas", "leaving_replicas"]

log = structlog.get_logger(__name__)


class ReplicaDeleter(Protocol):
    def delete_replica(self, topic: str, partition: int) -> bool: ...


def leaving_replicas(held: Mapping[tuple[str, int], Replica], broker_id: int,
                     roles: Sequence[PartitionRole]) -> list[Replica]:
    """The replicas in ``held`` whose role in ``roles`` does not list ``broker_id`` (and is not older)."""
    out = []
    for role in roles:
        replica = held.get((role.topic, role.partition))
        if replica is not None and broker_id not in role.replicas and role.leader_epoch >= replica.leader_epoch:
            out.append(replica)
    return out


def delete_replicas(store: ReplicaDeleter, replicas: Iterable[Replica]) -> list[tuple[str, int]]:
    """Delete each replica's log: set aside now, its files removed in the background. Never raises (logs).

    Returns:
        The (topic, partition) of each replica that could not be set aside ([] when all were).
    """
    failed = []
    for replica in replicas:
        directory = replica.log.directory
        try:
            store.delete_replica(replica.topic, replica.partition)
        except BrokerError as exc:
            log.error("replica.delete_failed", topic=replica.topic, partition=replica.partition, error=str(exc))
            failed.append((replica.topic, replica.partition))
            continue
        aside = sorted(glob.glob(f"{glob.escape(directory)}.*.deleted"))
        if aside:
            threading.Thread(target=_remove_files, args=(replica.topic, replica.partition, aside),
                             name="rill-replica-delete", daemon=True).start()
    return failed


def _remove_files(topic: str, partition: int, directories: list[str]) -> None:
    size = 0
    for directory in directories:
        for root, _, files in os.walk(directory):
            size += sum(os.path.getsize(os.path.join(root, f)) for f in files if os.path.isfile(os.path.join(root, f)))
        shutil.rmtree(directory, ignore_errors=True)
    log.info("replica.files_deleted", topic=topic, partition=partition, directories=directories, bytes=size)

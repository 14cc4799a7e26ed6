"""The partition cap: how many partitions a user may create (the ``partitions_created_max`` quota).

Every topic creation and partition addition a principal asks for (CREATE_TOPIC, a
produce that auto-creates, Admin CreateTopic and CreatePartitions) first asks
:meth:`PartitionCap.reserve` for its partitions. With no cap for the user (neither at
``users/<user>`` nor at ``users/<default>``) that is one lookup and nothing is
counted. With a cap, the partitions the user created so far are read from the user's
entity (key ``partitions_created``, beside its quotas and credentials, so every broker
of a cluster shares the count through ZooKeeper), and a creation that would go over
the cap is refused; otherwise the count grows by the partitions asked for, when they
are asked for (a creation that then fails still counts: the count errs towards
refusing). Deleting a topic does not give partitions back; an operator resets the count
with ``rill quotas set --user U --delete partitions_created``.

The count is written on a thread of its own (a ZooKeeper write must not hold the event
loop), and creations the writer has not stored yet are added in memory, so two
creations in a row cannot both pass on the same old count.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import structlog

from rill.broker.security.quota_manager import QuotaManager
from rill.client.security import principal as principals
from rill.client.security.entity_configs import EntityConfigs
from rill.client.security.quota_keys import PARTITIONS_CREATED

__all__ = ["COUNT_KEY", "PartitionCap"]

log = structlog.get_logger(__name__)
audit = structlog.get_logger("rill.audit")

COUNT_KEY = PARTITIONS_CREATED


class PartitionCap:
    """Checks and counts the partitions each user creates (see the module docstring)."""

    def __init__(self, quotas: QuotaManager, configs: Callable[[], EntityConfigs | None]) -> None:
        self.quotas = quotas
        self._configs = configs
        self._lock = threading.Lock()
        self._unwritten: dict[str, int] = {}  # per user: partitions counted but not yet in the store
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rill-partition-cap")

    def reserve(self, principal: str, partitions: int) -> str | None:
        """Count ``partitions`` for ``principal``'s user; None, or why the cap refuses them."""
        if principal == principals.BROKER or partitions <= 0:
            return None
        user = principals.name_of(principal)
        cap = self.quotas.partitions_cap(user)
        configs = self._configs()
        if cap is None or configs is None:
            return None
        entity = f"users/{user}"
        with self._lock:
            created = _count(configs.get(entity).get(COUNT_KEY)) + self._unwritten.get(user, 0)
            if created + partitions > cap:
                audit.info("audit.denied", principal=principal, operation="Create",
                           resource=f"partitions_created_max:{user}", created=created, asked=partitions, cap=cap)
                return (f"{principal} may create at most {cap} partitions (partitions_created_max) and has created "
                        f"{created}: {partitions} more would exceed it")
            self._unwritten[user] = self._unwritten.get(user, 0) + partitions
        self._writer.submit(self._write, configs, user, partitions)
        return None

    def _write(self, configs: EntityConfigs, user: str, partitions: int) -> None:
        entity = f"users/{user}"
        try:
            stored = _count(configs.get(entity).get(COUNT_KEY))
            configs.alter(entity, {COUNT_KEY: str(stored + partitions)}, ())
        except Exception as exc:  # the count stays in memory for this broker's life; logged
            log.warning("partition_cap.write_failed", user=user, partitions=partitions, error=str(exc))
            return
        with self._lock:
            left = self._unwritten.get(user, 0) - partitions
            if left > 0:
                self._unwritten[user] = left
            else:
                self._unwritten.pop(user, None)

    def close(self) -> None:
        self._writer.shutdown(wait=True)


def _count(value: str | None) -> int:
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0

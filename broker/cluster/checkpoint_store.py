"""Group checkpoints in ZooKeeper: ``/rill/groups/[group]``, one node per group.

The value is a checkpoint as rill.coordinator.group_checkpoint encodes it (JSON). Writes
are conditional: a node is created only if it does not exist and set only at the
version this broker last read or wrote, so a broker whose idea of the node is out of
date (it lost the group) gets ``BadVersionError`` / ``NodeExistsError`` instead of
overwriting. Several checkpoints are written in one ZooKeeper transaction (multi-op),
up to :data:`MAX_TRANSACTION_BYTES` each: ZooKeeper refuses requests larger than its
``jute.maxbuffer`` (1 MiB by default), which also bounds one group's checkpoint.

Thread-safe as the kazoo client is; blocking. Connection errors are raised as kazoo's
exceptions; per-node outcomes of a batch are returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, RolledBackError

from rill.coordinator import group_checkpoint
from rill.coordinator.group_checkpoint import Checkpoint

log = structlog.get_logger(__name__)

GROUPS_PATH = "/rill/groups"
MAX_TRANSACTION_BYTES = 512 * 1024

Outcome = Union[int, KazooException]   # the node's new version, or why this write failed


class CheckpointStore:
    def __init__(self, zk: KazooClient, root: str = GROUPS_PATH) -> None:
        self.zk = zk
        self.root = root
        self._ensured = False

    def path(self, group: str) -> str:
        return f"{self.root}/{group}"

    def _ensure_root(self) -> None:
        if not self._ensured:
            self.zk.ensure_path(self.root)
            self._ensured = True

    def read(self, group: str) -> tuple[Checkpoint | None, int | None]:
        """(checkpoint, node version); (None, None) without a node, (None, version) for an unreadable value."""
        try:
            data, stat = self.zk.get(self.path(group))
        except NoNodeError:
            return None, None
        try:
            return group_checkpoint.decode(bytes(data)), int(stat.version)
        except ValueError as exc:
            log.error("group.checkpoint_unreadable", group=group, path=self.path(group), error=str(exc))
            return None, int(stat.version)

    def names(self) -> list[str]:
        """Every group with a node (tombstones included), sorted."""
        try:
            return sorted(self.zk.get_children(self.root))
        except NoNodeError:
            return []

    def write(self, items: Sequence[tuple[Checkpoint, int | None]]) -> dict[str, Outcome]:
        """Write each checkpoint (create when the version is None, else set at that version).

        Batched into transactions; a transaction that fails because of some of its
        writes is retried without them. Returns each group's outcome.
        """
        self._ensure_root()
        outcomes: dict[str, Outcome] = {}
        batch: list[tuple[Checkpoint, int | None, bytes]] = []
        size = 0
        for cp, version in items:
            data = group_checkpoint.encode(cp)
            if batch and size + len(data) > MAX_TRANSACTION_BYTES:
                outcomes.update(self._commit(batch))
                batch, size = [], 0
            batch.append((cp, version, data))
            size += len(data) + len(cp.group) + 64
        if batch:
            outcomes.update(self._commit(batch))
        return outcomes

    def _commit(self, batch: list[tuple[Checkpoint, int | None, bytes]]) -> dict[str, Outcome]:
        outcomes: dict[str, Outcome] = {}
        while batch:
            txn = self.zk.transaction()
            for cp, version, data in batch:
                if version is None:
                    txn.create(self.path(cp.group), data)
                else:
                    txn.set_data(self.path(cp.group), data, version=version)
            results = txn.commit()
            errors = {i for i, r in enumerate(results) if isinstance(r, Exception)}
            failed = {i for i in errors if not isinstance(results[i], RolledBackError)} or errors
            if not failed:
                for (cp, _, _), result in zip(batch, results):
                    outcomes[cp.group] = 0 if isinstance(result, str) else int(result.version)
                return outcomes
            for i in failed:
                outcomes[batch[i][0].group] = results[i]
            batch = [item for i, item in enumerate(batch) if i not in failed]
        return outcomes


__all__ = ["CheckpointStore", "GROUPS_PATH", "MAX_TRANSACTION_BYTES", "Outcome"]

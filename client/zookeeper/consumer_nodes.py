"""One member's reads and writes under ``/consumers/[group]`` (seed 000 5.6, seed 004).

::

    /consumers/[group]/ids/[consumer id]              -> subscription  (ephemeral)
    /consumers/[group]/owners/[topic]/[broker-part]   -> owning thread id  (ephemeral)
    /consumers/[group]/offsets/[topic]/[broker-part]  -> next offset, decimal  (persistent)

Intermediate nodes are created holding the creator's id (seed 004: "the value that
should be stored at an intermediate node is the ID of the node's creator").

Ownership is decided only by the ephemeral create of an owner node: ``claim`` never
overwrites or deletes a node that another session holds, and ``release`` deletes
only nodes held by this client's current session (checked against the node's
``ephemeralOwner``, deleted at that version), so a node left by a dead session is
waited for, never taken over. Every path a claim may have created is remembered
before the create is sent, so a create whose answer was lost (connection loss) is
still released.

Not thread-safe: the consumer calls it from one thread at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from rill.client.zookeeper.assignment import Subscription, decode_subscription, encode_subscription
from rill.client.zookeeper.ephemeral import create_or_adopt
from rill.client.zookeeper.streams import PartitionKey

__all__ = ["ConsumerIdInUse", "GroupDirs", "ZkGroup"]

log = structlog.get_logger(__name__)

CLAIM_ATTEMPTS = 3  # create / read races before a claim reports the node as held


class ConsumerIdInUse(RuntimeError):
    """Another live session holds our ids node: two consumers were given the same consumerid."""


class GroupDirs:
    """The group's paths (0.7's ZKGroupDirs and ZKGroupTopicDirs)."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.root = f"/consumers/{group}"
        self.ids = f"{self.root}/ids"
        self.owners = f"{self.root}/owners"
        self.offsets = f"{self.root}/offsets"

    def id_path(self, consumer: str) -> str:
        return f"{self.ids}/{consumer}"

    def owner_path(self, key: PartitionKey) -> str:
        return f"{self.owners}/{key.topic}/{key.name}"

    def offset_path(self, key: PartitionKey) -> str:
        return f"{self.offsets}/{key.topic}/{key.name}"


class ZkGroup:
    """Registration, members, owner claims and offsets of one consumer in one group."""

    def __init__(self, zk: KazooClient, group: str, consumer: str) -> None:
        self.zk = zk
        self.dirs = GroupDirs(group)
        self.consumer = consumer
        self._known_dirs: set[str] = set()
        self._claimed: set[str] = set()  # owner paths this session may hold
        self._own_sessions: set[int] = set()  # every session we registered with

    @property
    def session(self) -> int:
        """The current session id; 0 while disconnected."""
        client_id = self.zk.client_id
        return int(client_id[0]) if client_id else 0

    def new_session(self) -> None:
        """The old session expired: its owner nodes died with it, and parents may be gone."""
        self._claimed.clear()
        self._known_dirs.clear()

    # -- registration -------------------------------------------------------------------------

    def register(self, subscription: Subscription) -> None:
        """Create (or refresh) our ephemeral ids node with the subscription value.

        A node left by an earlier session of ours is replaced.

        Raises:
            ConsumerIdInUse: a session that was never ours holds the node.
        """
        path = self.dirs.id_path(self.consumer)
        value = encode_subscription(subscription)
        self._ensure_parents(path)
        while True:
            session = self.session
            held = create_or_adopt(self.zk, path, value, session)
            if held is None:
                self._own_sessions.add(session)
                return
            if held.owner not in self._own_sessions:
                raise ConsumerIdInUse(f"{path} is held by another live session ({held.owner:#x}): two consumers "
                                      f"of group {self.dirs.group!r} have the id {self.consumer!r}")
            log.info("zookeeper_consumer.stale_registration_deleted", path=path, owner=hex(held.owner))
            self._delete_at(path, held.version)

    def unregister(self) -> None:
        path = self.dirs.id_path(self.consumer)
        try:
            _, stat = self.zk.get(path)
        except NoNodeError:
            return
        if int(stat.ephemeralOwner) == self.session:
            self._delete_at(path, stat.version)

    def members(self, watch: Any) -> dict[str, Subscription]:
        """Every registered member's subscription; sets ``watch`` on the ids children.

        A member whose node vanished meanwhile is left out; one whose value cannot be
        parsed is left out with a warning (no 0.7 consumer writes such a value).
        """
        self._ensure_dir(self.dirs.ids)
        children = self.zk.get_children(self.dirs.ids, watch=watch)
        pending = [(child, self.zk.get_async(f"{self.dirs.ids}/{child}")) for child in children]
        members: dict[str, Subscription] = {}
        for child, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                continue
            try:
                members[child] = decode_subscription(bytes(data))
            except ValueError as exc:
                log.warning("zookeeper_consumer.bad_member_registration", member=child, error=str(exc))
        return members

    # -- ownership ----------------------------------------------------------------------------

    def claim(self, key: PartitionKey, thread: str) -> str | None:
        """Create the owner node of ``key`` holding ``thread``.

        Returns:
            None when we own it now (created, or already ours in this session); else
            the value of the node another owner holds ("?" if it vanished each time).
        """
        path = self.dirs.owner_path(key)
        self._ensure_parents(path)
        holder = "?"
        for _ in range(CLAIM_ATTEMPTS):
            self._claimed.add(path)
            try:
                self.zk.create(path, thread.encode(), ephemeral=True)
                return None
            except NodeExistsError:
                pass
            except NoNodeError:  # a parent was deleted behind our back
                self._known_dirs.clear()
                self._ensure_parents(path)
                continue
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                continue
            holder = bytes(data).decode(errors="replace")
            if int(stat.ephemeralOwner) == self.session:
                if holder == thread:
                    return None
                self._claimed.discard(path)  # ours, for another thread: released below, claimed afresh
                self._delete_at(path, stat.version)
                continue
            self._claimed.discard(path)
            return holder
        return holder

    def release(self, paths: Iterable[str] | None = None) -> int:
        """Delete our owner nodes (``paths``, or every one this session may hold).

        Returns how many were deleted. Nodes held by other sessions are left alone.
        """
        targets = set(self._claimed if paths is None else paths)
        pending = [(path, self.zk.get_async(path)) for path in sorted(targets)]
        deleted = 0
        for path, result in pending:
            self._claimed.discard(path)
            try:
                _, stat = result.get()
            except NoNodeError:
                continue
            if int(stat.ephemeralOwner) == self.session:
                deleted += self._delete_at(path, stat.version)
        return deleted

    # -- offsets --------------------------------------------------------------------------

    def read_offsets(self, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int | None]:
        """The committed offset of each partition; None when there is none (or it is garbage)."""
        pending = [(key, self.zk.get_async(self.dirs.offset_path(key))) for key in keys]
        offsets: dict[PartitionKey, int | None] = {}
        for key, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                offsets[key] = None
                continue
            text = bytes(data).decode(errors="replace").strip()
            try:
                offsets[key] = int(text)
            except ValueError:
                log.warning("zookeeper_consumer.bad_offset", path=self.dirs.offset_path(key), value=text[:40])
                offsets[key] = None
        return offsets

    def write_offsets(self, offsets: Mapping[PartitionKey, int]) -> None:
        """Write each offset as a decimal string (persistent nodes; created when missing)."""
        pending = [(key, str(offset).encode(), self.zk.set_async(self.dirs.offset_path(key), str(offset).encode()))
                   for key, offset in offsets.items()]
        for key, value, result in pending:
            try:
                result.get()
            except NoNodeError:
                path = self.dirs.offset_path(key)
                self._ensure_parents(path)
                try:
                    self.zk.create(path, value)
                except NodeExistsError:
                    self.zk.set(path, value)

    # -- helpers --------------------------------------------------------------------------

    def _delete_at(self, path: str, version: int) -> int:
        try:
            self.zk.delete(path, version=version)
            return 1
        except (NoNodeError, BadVersionError):
            return 0

    def _ensure_parents(self, path: str) -> None:
        self._ensure_dir(path.rsplit("/", 1)[0])

    def _ensure_dir(self, path: str) -> None:
        """Create ``path`` and its missing ancestors, each holding our consumer id."""
        if path in self._known_dirs or not path.strip("/"):
            return
        prefix = ""
        for part in path.strip("/").split("/"):
            prefix += "/" + part
            if prefix in self._known_dirs:
                continue
            if self.zk.exists(prefix) is None:
                try:
                    self.zk.create(prefix, self.consumer.encode())
                except NodeExistsError:
                    pass
            self._known_dirs.add(prefix)

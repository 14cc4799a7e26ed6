"""Creating an ephemeral node that may already exist, as Kafka 0.7's registrations do.

A registration (a broker's ``/brokers/ids/[id]``, a consumer's ids node) is an ephemeral
node. It may already exist: created by this very session (a retry after a connection
loss), by an earlier session of ours that has not expired yet, or by someone else.
:func:`create_or_adopt` settles the first case and reports the others; each caller
decides what a node held by another session means for it (wait, delete, give up).
"""

from __future__ import annotations

from typing import NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError


class Held(NamedTuple):
    """An existing node held by another session: its owner, value and version."""

    owner: int
    data: bytes
    version: int


def create_or_adopt(zk: KazooClient, path: str, value: bytes, session: int) -> Held | None:
    """Create ``path`` as an ephemeral node of ``session`` holding ``value``.

    A node that ``session`` already owns is adopted (its value set to ``value`` if it
    differs). The parents must exist.

    Returns:
        None when the node is now ``session``'s with ``value``; otherwise the node as
        another session holds it.
    """
    while True:
        try:
            zk.create(path, value, ephemeral=True)
            return None
        except NodeExistsError:
            pass
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            continue  # vanished meanwhile: create again
        owner = int(stat.ephemeralOwner)
        if owner != session:
            return Held(owner, bytes(data), stat.version)
        if data != value:
            zk.set(path, value, version=stat.version)
        return None

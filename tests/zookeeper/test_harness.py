"""The ZooKeeper test harness itself: one node with chroots, and a three-node ensemble."""

from __future__ import annotations

import time

from kazoo.client import KazooClient

from tests.zk import ZkEnsemble, four_letter


def test_chroot_is_private_and_usable(zk_connect: str) -> None:
    """Each test gets an empty chroot on the session's single node."""
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        assert zk.get_children("/") == []
        zk.create("/a/b", b"x", makepath=True)
        assert zk.get("/a/b")[0] == b"x"
    finally:
        zk.stop()
        zk.close()


def test_ensemble_forms_quorum_and_survives_one_node_stopping(zk_ensemble: ZkEnsemble) -> None:
    """Three nodes elect a leader, and the remaining two keep serving writes after one stops."""
    modes = [four_letter(n.port, b"srvr") for n in zk_ensemble.nodes]
    assert sum(b"Mode: leader" in m for m in modes) == 1, modes
    assert sum(b"Mode: follower" in m for m in modes) == 2, modes
    zk = KazooClient(hosts=zk_ensemble.connect, timeout=10)
    zk.start(timeout=10)
    try:
        zk.create("/before", b"1")
        leader = next(n for n, m in zip(zk_ensemble.nodes, modes) if b"Mode: leader" in m)
        leader.stop()
        deadline = time.monotonic() + 20
        while True:
            try:
                zk.create("/after", b"2")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert zk.get("/before")[0] == b"1" and zk.get("/after")[0] == b"2"
    finally:
        zk.stop()
        zk.close()

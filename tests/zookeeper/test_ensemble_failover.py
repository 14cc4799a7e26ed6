"""Brokers and ZooKeeper consumers ride out the loss of the ensemble's leader (three nodes).

ZooKeeper sessions survive a server going away as long as the client reconnects to
another server within the session timeout: nothing ephemeral may be lost, no
rebalance is needed, and consumption goes on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.client.zookeeper import ZkConsumer, ZkRecord
from tests.zk import ZkEnsemble, four_letter
from tests.zookeeper.test_broker_registration import wait_for
from tests.zookeeper.zk_consumer_support import FAST, owner_nodes, produce, values, zk_brokers


@pytest.mark.slow
def test_broker_and_consumer_survive_the_ensemble_leader_stopping(tmp_path: Path, zk_ensemble: ZkEnsemble) -> None:
    root = KazooClient(hosts=zk_ensemble.connect, timeout=10)
    root.start(timeout=10)
    root.ensure_path("/cluster")
    connect = zk_ensemble.connect + "/cluster"
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        with zk_brokers(tmp_path, connect, {"t": 2}, zk=zk) as brokers:
            first = produce(brokers, "t", 2, 5, tag="a")
            settings = {**FAST, "zk_sessiontimeout_ms": 8000}
            with ZkConsumer(zookeeper=connect, group="g", **settings) as consumer:
                consumer.subscribe(["t"])
                got: list[ZkRecord] = []
                wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) >= len(first), timeout=20,
                         what="the first messages")
                ids_before = {p: zk.get(f"/brokers/ids/{p}")[1].ephemeralOwner for p in ("0", "1")}
                owners_before = owner_nodes(zk, "g")
                assert len(owners_before) == 4

                leader = next(n for n in zk_ensemble.nodes if b"Mode: leader" in four_letter(n.port, b"srvr"))
                leader.stop()

                second = produce(brokers, "t", 2, 5, tag="b")
                wait_for(lambda: got.extend(consumer.poll(0.1)) or set(values(got)) >= first | second, timeout=30,
                         what="messages produced after the leader stopped")
                # the same sessions still hold the same nodes: nothing expired, nothing rebalanced
                assert {p: zk.get(f"/brokers/ids/{p}")[1].ephemeralOwner for p in ("0", "1")} == ids_before
                assert owner_nodes(zk, "g") == owners_before
    finally:
        zk.stop()
        zk.close()
        root.stop()
        root.close()

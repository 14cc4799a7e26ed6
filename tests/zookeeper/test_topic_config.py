"""Topic settings changed at run time (issue 14): real ZooKeeper, and three in-process brokers.

AlterTopicConfig writes ``/rill/topics/[topic]`` conditionally, so concurrent alters of
different keys both survive; the controller sees the node change and sends the topic's
partitions again, so a leader applies a new ``min.insync.replicas`` to its next acks=all
produce, and the controller's next election reads ``unclean.leader.election.enable``,
with no restart.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.controller_context import unclean_for
from rill.broker.cluster.partition_states import read_topic
from rill.broker.cluster.replicated_topics import create_topic
from rill.broker.cluster.topic_config import alter_topic_config
from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from rill.client.errors import NotEnoughReplicas
from rill.client.grpc_client import AdminClient
from rill.v1 import coordinator_pb2 as pb
from tests.zookeeper.replicated_support import (Brokers, create_replicated, leader_of, produce_acked,
                                                replicated_cluster, stop_broker)
from tests.zookeeper.test_broker_registration import wait_for

TOPIC = "orders"
MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"


class Interleaved:
    """A kazoo client whose first ``get`` of the topic lets another session alter ``key`` before it returns."""

    def __init__(self, zk: KazooClient, other: KazooClient, key: str) -> None:
        self.zk, self.other, self.key, self.raced = zk, other, key, False

    def get(self, path: str, **kwargs: Any) -> Any:
        found = self.zk.get(path, **kwargs)
        if not self.raced:
            self.raced = True
            alter_topic_config(self.other, TOPIC, {self.key: "true"}, [])
        return found

    def set(self, path: str, data: bytes, version: int = -1) -> Any:
        return self.zk.set(path, data, version=version)


@pytest.fixture
def other_zk(zk_connect: str) -> Any:
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_alter_losing_a_race_on_zookeeper_keeps_both_keys(zk: KazooClient, other_zk: KazooClient) -> None:
    """Another session alters a different key between our read and write: ZooKeeper's BadVersion, a re-read, both."""
    create_topic(zk, TOPIC, 2, 1, {MIN_ISR: "1"}, [1])
    racing = Interleaved(zk, other_zk, UNCLEAN)
    change = alter_topic_config(racing, TOPIC, {MIN_ISR: "2"}, [])  # type: ignore[arg-type]
    assert racing.raced and dict(change.after) == {MIN_ISR: "2", UNCLEAN: "true"}
    replicas = read_topic(zk, TOPIC)
    assert replicas is not None and dict(replicas.config) == {MIN_ISR: "2", UNCLEAN: "true"}
    assert replicas.replicas == ((1,), (1,))


def test_concurrent_alters_of_different_keys_all_survive(zk: KazooClient, other_zk: KazooClient) -> None:
    """Two sessions altering different keys 30 times each at once: the last value of each key is there."""
    create_topic(zk, TOPIC, 1, 1, None, [1])
    errors: list[BaseException] = []

    def run(client: KazooClient, values: list[dict[str, str]]) -> None:
        try:
            for value in values:
                alter_topic_config(client, TOPIC, value, [])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(zk, [{MIN_ISR: str(i)} for i in range(1, 31)])),
               threading.Thread(target=run, args=(other_zk, [{UNCLEAN: str(i % 2 == 0).lower()} for i in range(30)]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    replicas = read_topic(zk, TOPIC)
    assert replicas is not None and dict(replicas.config) == {MIN_ISR: "30", UNCLEAN: "false"}


def _min_insync_on_leader(brokers: Brokers, partition: int = 0) -> int:
    leader = leader_of(brokers, TOPIC, partition)
    assert leader is not None
    manager = leader.broker.replicas
    return manager.min_insync_for(manager.replicas[(TOPIC, partition)])


def _isr_size_on_leader(brokers: Brokers, partition: int = 0) -> int:
    leader = leader_of(brokers, TOPIC, partition)
    assert leader is not None
    manager = leader.broker.replicas
    return manager.in_sync_count(manager.replicas[(TOPIC, partition)])


def _alter(b: RunningBroker, to_set: dict[str, str], to_delete: tuple[str, ...] = ()) -> dict[str, str]:
    with AdminClient(b.grpc_address, timeout=10) as admin:
        response = admin.alter_topic_config(TOPIC, to_set, to_delete)
    assert response.error_code == pb.NONE, response.error_message
    return dict(response.config)


def test_min_insync_replicas_altered_applies_to_the_next_acks_all_produce(tmp_path: Path, zk_connect: str,
                                                                          zk: KazooClient) -> None:
    """min.insync.replicas=3 with a follower stopped refuses acks=all (NotEnoughReplicas); back to 2 it is
    accepted again: no broker restarts."""
    with replicated_cluster(tmp_path, zk_connect) as brokers:
        create_replicated(zk, brokers, TOPIC, 1)
        assert _alter(brokers[1], {MIN_ISR: "3"}) == {MIN_ISR: "3"}
        wait_for(lambda: _min_insync_on_leader(brokers) == 3, timeout=10, what="the leader to apply min.insync 3")
        assert len(produce_acked(brokers, TOPIC, 0, [b"three in sync"])) == 1
        leader = leader_of(brokers, TOPIC, 0)
        follower = next(b for b in brokers.values() if b is not leader)
        running = stop_broker(brokers, follower, TOPIC, 1)
        wait_for(lambda: _isr_size_on_leader(running) == 2, timeout=15, what="the ISR to shrink to 2")
        with pytest.raises(NotEnoughReplicas):
            produce_acked(running, TOPIC, 0, [b"refused"])
        asked = next(iter(running.values()))
        assert _alter(asked, {MIN_ISR: "2"}) == {MIN_ISR: "2"}
        wait_for(lambda: _min_insync_on_leader(running) == 2, timeout=10, what="the leader to apply min.insync 2")
        assert len(produce_acked(running, TOPIC, 0, [b"two in sync"])) == 1


def _controller_unclean(brokers: Brokers) -> bool | None:
    for b in brokers.values():
        ctx = b.broker.controller._ctx if b.broker.controller is not None else None
        if ctx is not None and TOPIC in ctx.topics:
            return unclean_for(ctx.topics[TOPIC], False)
    return None


def test_cli_alter_describe_round_trip_and_refusals(tmp_path: Path, zk_connect: str, zk: KazooClient,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """rill topics alter prints the change, describe shows a CONFIGS column, the controller's elections see
    unclean.leader.election.enable; an unknown key, a bad value and an unknown topic are refused by name."""
    with replicated_cluster(tmp_path, zk_connect) as brokers:
        create_replicated(zk, brokers, TOPIC, 2)
        grpc = brokers[2].grpc_address
        assert main(["topics", "describe", "--grpc", grpc, "--topic", TOPIC]) == 0
        assert "CONFIGS" not in capsys.readouterr().out  # no settings: the output of before
        assert main(["topics", "alter", "--grpc", grpc, "--topic", TOPIC, "--config", "min.insync.replicas=2",
                     "--config", "unclean.leader.election.enable=true"]) == 0
        assert capsys.readouterr().out == (f"Altered config of topic {TOPIC}:\n  min.insync.replicas: (default) -> 2\n"
                                           "  unclean.leader.election.enable: (default) -> true\n")
        wait_for(lambda: _controller_unclean(brokers) is True, timeout=10, what="the controller to see unclean")
        assert main(["topics", "describe", "--grpc", brokers[3].grpc_address, "--topic", TOPIC]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].endswith("\tLEADER\tREPLICAS\tISR\tLEADER_EPOCH\tCONFIGS") and len(lines) == 3
        assert all(line.endswith("\tmin.insync.replicas=2,unclean.leader.election.enable=true") for line in lines[1:])
        assert main(["topics", "alter", "--grpc", grpc, "--topic", TOPIC, "--delete-config", UNCLEAN]) == 0
        assert capsys.readouterr().out == (f"Altered config of topic {TOPIC}:\n"
                                           "  unclean.leader.election.enable: true -> (default)\n")
        wait_for(lambda: _controller_unclean(brokers) is False, timeout=10, what="the controller to drop unclean")
        for argv, message in [
            (["--config", "retention.hours=1"], "INVALID_CONFIG: unknown topic setting 'retention.hours'"),
            (["--config", "segment.bytes=100"], "INVALID_CONFIG: topic setting segment.bytes='100' must be "
                                                "a whole number 1024..2147483647"),
            (["--config", "min.insync.replicas=0"], "INVALID_CONFIG: topic setting min.insync.replicas='0' must be "
                                                    "a whole number >= 1"),
            (["--config", "unclean.leader.election.enable=maybe"], "must be true or false"),
        ]:
            assert main(["topics", "alter", "--grpc", grpc, "--topic", TOPIC, *argv]) == 1
            assert message in capsys.readouterr().err
        assert main(["topics", "alter", "--grpc", grpc, "--topic", "nosuch", "--config", "min.insync.replicas=2"]) == 1
        assert "UNKNOWN_TOPIC_OR_PARTITION: topic nosuch does not exist" in capsys.readouterr().err
        replicas = read_topic(zk, TOPIC)
        assert replicas is not None and dict(replicas.config) == {MIN_ISR: "2"}


def test_log_settings_apply_to_every_replica_without_restarts(tmp_path: Path, zk_connect: str,
                                                               zk: KazooClient) -> None:
    """segment.bytes and retention.bytes set on the topic: every replica rolls at the new size and the next
    retention pass keeps only what the topic allows; deleted, the broker's settings come back."""
    with replicated_cluster(tmp_path, zk_connect) as brokers:
        create_replicated(zk, brokers, TOPIC, 1)
        assert _alter(brokers[1], {"segment.bytes": "2048", "retention.bytes": "4096"}) == {
            "segment.bytes": "2048", "retention.bytes": "4096"}

        def configs() -> set[tuple[int, int]]:
            found = [b.broker.logs.get(TOPIC, 0).config for b in brokers.values()]
            return {(c.segment_bytes, c.retention_bytes) for c in found}
        wait_for(lambda: configs() == {(2048, 4096)}, timeout=10, what="every replica to apply the settings")
        for n in range(40):  # 40 x ~1 KB: twenty segments at 2 KB
            produce_acked(brokers, TOPIC, 0, [bytes([n]) * 1000])
        leader = leader_of(brokers, TOPIC, 0)
        assert leader is not None
        end = leader.broker.logs.get(TOPIC, 0).end_offset
        wait_for(lambda: all(b.broker.logs.get(TOPIC, 0).end_offset == end for b in brokers.values()), timeout=10,
                 what="the followers to catch up")
        for b in brokers.values():
            log_ = b.broker.logs.get(TOPIC, 0)
            assert len(log_.segments) >= 15, b.broker_id  # rolled at 2 KB, not at the broker's 1 GB
            b.broker.logs.run_retention(time.time())
            assert sum(s.size for s in log_.segments) <= 4096 + 2048, b.broker_id  # the active one may pass it
            assert log_.start_offset > 0
        _alter(brokers[2], {}, ("segment.bytes", "retention.bytes"))
        default = brokers[1].broker.logs.config
        wait_for(lambda: configs() == {(default.segment_bytes, default.retention_bytes)}, timeout=10,
                 what="the broker's settings back")

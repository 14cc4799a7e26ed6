"""Entity settings in ZooKeeper (rill.client.security.entity_configs_zk) in Kafka's layout, and ``rill users
--zookeeper``; against a real ZooKeeper, each test in its own chroot."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kazoo.client import KazooClient, KazooState

from rill.client.cli import security_stores
from rill.client.cli.main import main
from rill.client.security import entity_configs_zk
from rill.client.security.entity_configs_zk import ZkEntityConfigs, desanitize, sanitize
from rill.client.security.scram import ScramCredential
from rill.client.security.scram_credentials import CredentialStore
from tests.zookeeper.test_broker_registration import wait_for


@contextmanager
def other_store(zk_connect: str) -> Iterator[ZkEntityConfigs]:
    """A second store on its own kazoo session, as another broker or ``rill users`` would have."""
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    try:
        with ZkEntityConfigs(client) as store:
            yield store
    finally:
        client.stop()
        client.close()


def notifications(zk: KazooClient) -> list[bytes]:
    return [zk.get(f"/config/changes/{c}")[0] for c in sorted(zk.get_children("/config/changes"))]


def test_sanitize_as_kafka_does() -> None:
    """Names are URL-encoded like Kafka's Sanitizer: only [A-Za-z0-9._-] stay; <default> stays as it is."""
    assert sanitize("alice") == "alice"
    assert sanitize("a.b-c_d") == "a.b-c_d"
    assert sanitize("alice@example.com") == "alice%40example.com"
    assert sanitize("CN=a, O=b*~") == "CN%3Da%2C%20O%3Db%2A%7E"
    assert sanitize("é") == "%C3%A9"
    assert sanitize("<default>") == "<default>"
    for name in ("alice", "CN=a, O=b*~+", "é/x", "<default>"):
        assert desanitize(sanitize(name)) == name


def test_kafka_layout_byte_for_byte(zk: KazooClient) -> None:
    """A user's credential is /config/users/<user> holding {"version":1,"config":{...}}, followed by a
    sequential /config/changes/config_change_ node holding {"version":2,"entity_path":"users/<user>"}."""
    with ZkEntityConfigs(zk) as configs:
        CredentialStore(configs).set_password("alice", "pw", iterations=4096)
        data, _ = zk.get("/config/users/alice")
        text = json.loads(data)["config"]["SCRAM-SHA-256"]
        assert data == b'{"version":1,"config":{"SCRAM-SHA-256":"' + text.encode() + b'"}}'
        assert ScramCredential.from_text("SCRAM-SHA-256", text).verify_password("pw")
        assert notifications(zk) == [b'{"version":2,"entity_path":"users/alice"}']
        [child] = zk.get_children("/config/changes")
        assert child.startswith("config_change_") and len(child) == len("config_change_") + 10


def test_nested_sanitized_and_default_entities(zk: KazooClient) -> None:
    """users/<u>/clients/<c> nests under the user; names are sanitized in node names and notifications."""
    with ZkEntityConfigs(zk) as configs:
        configs.alter("users/alice@example.com/clients/app 1", set={"producer_byte_rate": "1024"})
        configs.alter("users/<default>", set={"consumer_byte_rate": "10"})
        configs.alter("clients/<default>", set={"request_percentage": "50"})
        assert json.loads(zk.get("/config/users/alice%40example.com/clients/app%201")[0]) == {
            "version": 1, "config": {"producer_byte_rate": "1024"}}
        assert zk.exists("/config/users/<default>") and zk.exists("/config/clients/<default>")
        assert [json.loads(n)["entity_path"] for n in notifications(zk)] == [
            "users/alice%40example.com/clients/app%201", "users/<default>", "clients/<default>"]
        assert configs.entities("users") == ["<default>", "alice@example.com"]
        assert configs.entities("users/alice@example.com/clients") == ["app 1"]


def test_loads_what_kafka_wrote(zk: KazooClient) -> None:
    """Entities already in ZooKeeper (sanitized names, empty parents, other types) are loaded at start."""
    zk.create("/config/users/bob%40x/clients/c", b'{"version":1,"config":{"k":"v"}}', makepath=True)
    zk.create("/config/users/carol", b'{"version":1,"config":{"SCRAM-SHA-512":"salt=x"}}', makepath=True)
    zk.create("/config/clients/app", b'{"version":1,"config":{}}', makepath=True)
    zk.create("/config/topics/t", b'{"version":1,"config":{"retention.ms":"1"}}', makepath=True)
    with ZkEntityConfigs(zk) as configs:
        assert configs.get("users/bob@x/clients/c") == {"k": "v"}
        assert configs.get("users/bob@x") == {}
        assert configs.entities("users") == ["bob@x", "carol"]
        assert configs.entities("clients") == []


def test_second_store_sees_a_change_through_the_watch(zk: KazooClient, zk_connect: str) -> None:
    """A change made through one kazoo session reaches a store on another session, and its subscribers."""
    with ZkEntityConfigs(zk) as writer, other_store(zk_connect) as reader:
        heard: list[str] = []
        reader.subscribe(heard.append)
        writer.alter("users/alice", set={"SCRAM-SHA-256": "c1", "producer_byte_rate": "5"})
        wait_for(lambda: heard == ["users/alice"], timeout=5, what="the change to reach the reader")
        assert reader.get("users/alice") == {"SCRAM-SHA-256": "c1", "producer_byte_rate": "5"}
        writer.alter("users/alice", delete=["SCRAM-SHA-256", "producer_byte_rate"])
        wait_for(lambda: heard == ["users/alice"] * 2, timeout=5, what="the deletion to reach the reader")
        assert reader.entities("users") == []


def test_keys_are_preserved_across_writers(zk: KazooClient, zk_connect: str) -> None:
    """Two stores each setting their own key on one entity keep both; the last key gone deletes the node."""
    with ZkEntityConfigs(zk) as one, other_store(zk_connect) as two:
        one.alter("users/alice", set={"SCRAM-SHA-256": "c"})
        two.alter("users/alice", set={"producer_byte_rate": "1"})
        assert json.loads(zk.get("/config/users/alice")[0])["config"] == {
            "SCRAM-SHA-256": "c", "producer_byte_rate": "1"}
        one.alter("users/alice", delete=["SCRAM-SHA-256"])
        assert json.loads(zk.get("/config/users/alice")[0])["config"] == {"producer_byte_rate": "1"}
        two.alter("users/alice", delete=["producer_byte_rate"])
        assert zk.exists("/config/users/alice") is None


def test_concurrent_writers_lose_nothing(zk: KazooClient, zk_connect: str) -> None:
    """Threads on two sessions writing distinct keys of one entity at once: conditional writes keep them all."""
    with ZkEntityConfigs(zk) as one, other_store(zk_connect) as two:
        def write(store: ZkEntityConfigs, prefix: str) -> None:
            for i in range(15):
                store.alter("clients/app", set={f"{prefix}{i}": "v"})

        threads = [threading.Thread(target=write, args=(store, prefix))
                   for store, prefix in [(one, "a"), (two, "b"), (one, "c"), (two, "d")]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(json.loads(zk.get("/config/clients/app")[0])["config"]) == 60


def test_emptied_client_entity_removes_empty_parents(zk: KazooClient) -> None:
    """Deleting the last key of users/<u>/clients/<c> deletes it, its clients node and the empty user node;
    a user with keys of its own stays."""
    with ZkEntityConfigs(zk) as configs:
        configs.alter("users/a/clients/c", set={"k": "v"})
        configs.alter("users/a/clients/c", delete=["k"])
        assert zk.exists("/config/users/a") is None
        configs.alter("users/b", set={"k": "v"})
        configs.alter("users/b/clients/c", set={"k": "v"})
        configs.alter("users/b", delete=["k"])  # has a child: kept as an empty config
        assert json.loads(zk.get("/config/users/b")[0]) == {"version": 1, "config": {}}
        configs.alter("users/b/clients/c", delete=["k"])
        assert zk.exists("/config/users/b") is None


def test_kafka_version_1_notifications_are_read(zk: KazooClient, zk_connect: str) -> None:
    """An old-style notification (entity_type, entity_name) written by another tool is followed too."""
    with ZkEntityConfigs(zk) as configs:
        zk.create("/config/clients/app", b'{"version":1,"config":{"k":"v"}}', makepath=True)
        zk.create("/config/changes/config_change_", b'{"version":1,"entity_type":"clients","entity_name":"app"}',
                  sequence=True)
        wait_for(lambda: configs.get("clients/app") == {"k": "v"}, timeout=5, what="the v1 notification")


def test_lost_session_reloads_everything(zk: KazooClient) -> None:
    """After a lost session (notifications may have been missed and purged) the store re-reads every entity."""
    with ZkEntityConfigs(zk) as configs:
        heard: list[str] = []
        configs.subscribe(heard.append)
        zk.create("/config/users/alice", b'{"version":1,"config":{"k":"v"}}', makepath=True)  # no notification
        time.sleep(0.2)
        assert configs.get("users/alice") == {}
        configs._on_state(KazooState.LOST)
        configs._on_state(KazooState.CONNECTED)
        wait_for(lambda: heard == ["users/alice"], timeout=5, what="the reload after the lost session")
        assert configs.get("users/alice") == {"k": "v"}


def test_writer_purges_expired_notifications(zk: KazooClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Notifications older than the expiry (15 minutes; 0 here) are deleted by the next writer; its own stays."""
    with ZkEntityConfigs(zk) as configs:
        configs.alter("users/a", set={"k": "1"})
        configs.alter("users/b", set={"k": "1"})
        assert len(zk.get_children("/config/changes")) == 2
        monkeypatch.setattr(entity_configs_zk, "NOTIFICATION_EXPIRY_S", 0)
        time.sleep(0.01)  # ctime is in milliseconds: the earlier ones are strictly older
        configs.alter("users/c", set={"k": "1"})
        assert notifications(zk) == [b'{"version":2,"entity_path":"users/c"}']


def test_users_cli_against_zookeeper(zk: KazooClient, zk_connect: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``rill users add|list|delete --zookeeper`` writes Kafka's node and notification, lists, and deletes."""
    assert main(["users", "add", "alice", "--password", "pw", "--iterations", "4096", "--zookeeper", zk_connect]) == 0
    assert "Added SCRAM-SHA-256 credential for user alice." in capsys.readouterr().out
    text = json.loads(zk.get("/config/users/alice")[0])["config"]["SCRAM-SHA-256"]
    assert ScramCredential.from_text("SCRAM-SHA-256", text).verify_password("pw")
    assert notifications(zk) == [b'{"version":2,"entity_path":"users/alice"}']
    assert main(["users", "list", "--zookeeper", zk_connect]) == 0
    assert capsys.readouterr().out == "NAME\tMECHANISMS\nalice\tSCRAM-SHA-256\n"
    assert main(["users", "delete", "alice", "--zookeeper", zk_connect]) == 0
    assert zk.exists("/config/users/alice") is None
    assert main(["users", "delete", "alice", "--zookeeper", zk_connect]) == 1
    assert "rill: error: user 'alice' does not exist" in capsys.readouterr().err


def test_users_cli_unreachable_zookeeper(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZooKeeper that does not answer is one error line, not a traceback."""
    monkeypatch.setattr(security_stores, "ZK_TIMEOUT_S", 0.5)
    assert main(["users", "list", "--zookeeper", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rill: error: cannot connect to ZooKeeper at 127.0.0.1:1") and "Traceback" not in err

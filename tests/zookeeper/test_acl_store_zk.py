"""The ZooKeeper ACL store: the common contract, Kafka's layout, change notifications and concurrent writers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.client.security.acl_store import AclStore
from rill.client.security.acl_store_zk import ZkAclStore
from rill.client.security.acls import AclBinding, AclBindingFilter, Operation, PatternType, Permission, ResourceType
from tests.unit.security.test_acl_store import AclStoreContract, binding, wait_for
from tests.zookeeper.test_broker_registration import expire_session


@pytest.fixture
def other_zk(zk_connect: str) -> Iterator[KazooClient]:
    """A second session in the test's chroot: another broker, or a command."""
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


class TestZkAclStore(AclStoreContract):
    @pytest.fixture
    def store(self, zk: KazooClient) -> Iterator[AclStore]:
        s = ZkAclStore(zk)
        yield s
        s.close()


def notifications(zk: KazooClient, path: str) -> list[bytes]:
    return [zk.get(f"{path}/{c}")[0] for c in sorted(zk.get_children(path))]


def test_kafkas_layout(zk: KazooClient) -> None:
    """Literal and prefixed ACLs are nodes in Kafka's paths and JSON, each change announced as Kafka announces it."""
    store = ZkAclStore(zk, watch=False)
    store.add([binding(), binding("ord", pattern=PatternType.PREFIXED, op=Operation.WRITE, host="10.0.0.1")])
    assert json.loads(zk.get("/kafka-acl/Topic/orders")[0]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/ord")[0])["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "10.0.0.1"}]
    assert notifications(zk, "/kafka-acl-changes") == [b"Topic:orders"]
    assert [json.loads(n) for n in notifications(zk, "/kafka-acl-extended-changes")] == [
        {"version": 1, "resourceType": "Topic", "name": "ord", "patternType": "PREFIXED"}]
    assert zk.get_children("/kafka-acl-changes")[0].startswith("acl_changes_")
    assert sorted(zk.get_children("/kafka-acl")) == ["Cluster", "Group", "Topic"]


def test_a_node_left_without_acls_is_deleted(zk: KazooClient) -> None:
    """Removing a resource's last ACL deletes its node; removing nothing writes no notification."""
    store = ZkAclStore(zk, watch=False)
    store.add([binding(), binding(principal="User:bob")])
    store.remove(AclBindingFilter(principal="User:bob"))
    assert zk.exists("/kafka-acl/Topic/orders") is not None
    store.remove(AclBindingFilter())
    assert zk.exists("/kafka-acl/Topic/orders") is None
    count = len(zk.get_children("/kafka-acl-changes"))
    store.remove(AclBindingFilter())
    assert len(zk.get_children("/kafka-acl-changes")) == count


def test_a_change_applies_at_once_in_another_store(zk: KazooClient, other_zk: KazooClient) -> None:
    """A broker's store hears another session's add and remove through the notifications and tells its subscribers."""
    broker = ZkAclStore(zk)
    heard = threading.Event()
    broker.subscribe(heard.set)
    command = ZkAclStore(other_zk, watch=False)
    command.add([binding("ord", pattern=PatternType.PREFIXED)])
    assert heard.wait(10)
    wait_for(lambda: broker.all() == [binding("ord", pattern=PatternType.PREFIXED)], what="the prefixed ACL")
    heard.clear()
    command.remove(AclBindingFilter())
    assert heard.wait(10)
    wait_for(lambda: broker.all() == [], what="the removal")
    broker.close()


def test_a_store_loads_what_is_there_at_start(zk: KazooClient, other_zk: KazooClient) -> None:
    """Everything written before a store starts is in it, of both trees."""
    acls = [binding(), binding("app", kind=ResourceType.GROUP), binding("o", pattern=PatternType.PREFIXED)]
    ZkAclStore(other_zk, watch=False).add(acls)
    assert ZkAclStore(zk, watch=False).all() == sorted(acls, key=AclBinding.sort_key)


def test_kafka_written_acls_are_read(zk: KazooClient) -> None:
    """A node and notification written the way Kafka writes them reach a running store."""
    store = ZkAclStore(zk)
    zk.create("/kafka-acl/Group/app", json.dumps({"version": 1, "acls": [
        {"principal": "User:*", "permissionType": "Deny", "operation": "Describe", "host": "*"}]}).encode())
    zk.create("/kafka-acl-changes/acl_changes_", b"Group:app", sequence=True)
    wait_for(lambda: store.all() == [binding("app", "User:*", Operation.DESCRIBE, Permission.DENY,
                                             ResourceType.GROUP)], what="Kafka's ACL")
    store.close()


def test_concurrent_writers_of_one_node_lose_nothing(zk_connect: str) -> None:
    """Four sessions adding 10 ACLs each to the same topic at once leave all 40 (conditional updates, retried)."""
    clients = [KazooClient(hosts=zk_connect, timeout=10) for _ in range(4)]
    for c in clients:
        c.start(timeout=10)
    try:
        stores = [ZkAclStore(c, watch=False, max_retries=100) for c in clients]

        def write(w: int) -> None:
            for i in range(10):
                stores[w].add([binding(principal=f"User:w{w}-{i}")])

        threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(ZkAclStore(clients[0], watch=False).all()) == 40
    finally:
        for c in clients:
            c.stop()
            c.close()


def test_writers_purge_notifications_older_than_15_minutes(zk: KazooClient) -> None:
    """A write deletes the change notifications created more than 15 minutes before it."""
    ZkAclStore(zk, watch=False).add([binding("a")])
    later = ZkAclStore(zk, watch=False, clock=lambda: time.time() + 16 * 60)
    later.add([binding("b")])
    wait_for(lambda: len(zk.get_children("/kafka-acl-changes")) == 1, what="the purge")
    assert notifications(zk, "/kafka-acl-changes") == [b"Topic:b"]


def test_after_a_lost_session_everything_is_read_again(zk: KazooClient, zk_connect: str) -> None:
    """ACLs whose notification a store missed (purged) are read when its session comes back."""
    store = ZkAclStore(zk)
    heard = threading.Event()
    store.subscribe(heard.set)
    zk.create("/kafka-acl/Topic/quiet", json.dumps({"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}).encode())
    expire_session(zk, zk_connect)
    assert heard.wait(10)
    wait_for(lambda: binding("quiet") in store.all(), what="the reload")
    store.close()


def test_bad_content(zk: KazooClient) -> None:
    """A bad node stops a new store (named in the error); a bad notification is logged and skipped."""
    store = ZkAclStore(zk)
    with capture_logs() as logs:
        zk.create("/kafka-acl-changes/acl_changes_", b"no separator", sequence=True)
        wait_for(lambda: any(e["event"] == "acls.zk_bad_change" for e in logs), what="the log event")
    zk.create("/kafka-acl/Topic/broken", b"{not json")
    with pytest.raises(ValueError, match="/kafka-acl/Topic/broken"):
        ZkAclStore(zk, watch=False)
    store.close()

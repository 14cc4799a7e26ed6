"""ACL stores: the contract every store keeps (memory, file; ZooKeeper in tests/zookeeper), then the file store's own.

:class:`AclStoreContract` is run against each implementation by subclassing it with a
``store`` fixture (trio's conformance-test habit).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.client.security.acl_store import AclStore, MemoryAclStore
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, Operation, PatternType,
                                       Permission, ResourcePattern, ResourceType)

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP


def binding(name: str = "orders", principal: str = "User:alice", op: Operation = Operation.READ,
            permission: Permission = Permission.ALLOW, kind: ResourceType = TOPIC,
            pattern: PatternType = PatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern), AccessControlEntry(principal, host, op, permission))


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class AclStoreContract:
    """What every AclStore does; a subclass provides the ``store`` fixture."""

    def test_add_keeps_a_set_and_reports_what_was_new(self, store: AclStore) -> None:
        """Adding an ACL twice stores it once; add returns only the new ones."""
        a, b = binding(), binding(principal="User:bob")
        assert store.add([a]) == [a]
        assert store.add([a, b, b]) == [b]
        assert store.all() == [a, b]

    def test_all_is_sorted_by_resource_then_entry(self, store: AclStore) -> None:
        """Listings come grouped by resource type, pattern type and name."""
        acls = [binding("t2"), binding("g", kind=GROUP), binding("t1", principal="User:zed"), binding("t1"),
                binding("t", pattern=PatternType.PREFIXED)]
        store.add(acls)
        assert store.all() == sorted(acls, key=AclBinding.sort_key)
        assert [b.pattern.name for b in store.all()] == ["g", "t1", "t1", "t2", "t"]

    def test_remove_returns_what_it_removed(self, store: AclStore) -> None:
        """remove(filter) takes exactly the matching bindings; nothing matched is an empty list."""
        keep, gone = binding(op=Operation.WRITE), binding(principal="User:bob")
        store.add([keep, gone])
        assert store.remove(AclBindingFilter(principal="User:bob")) == [gone]
        assert store.remove(AclBindingFilter(principal="User:bob")) == []
        assert store.all() == [keep]

    def test_remove_with_a_match_filter(self, store: AclStore) -> None:
        """MATCH removes the literal, the wildcard and the prefixes that apply to a name, nothing else."""
        applying = [binding("orders"), binding("*"), binding("ord", pattern=PatternType.PREFIXED)]
        other = [binding("orders-eu"), binding("orders", kind=GROUP)]
        store.add(applying + other)
        removed = store.remove(AclBindingFilter(TOPIC, "orders", PatternType.MATCH))
        assert sorted(removed, key=AclBinding.sort_key) == sorted(applying, key=AclBinding.sort_key)
        assert store.all() == sorted(other, key=AclBinding.sort_key)

    def test_list_filters(self, store: AclStore) -> None:
        """list(filter) is the matching part of all()."""
        a, b = binding(), binding(op=Operation.WRITE, permission=Permission.DENY, host="10.0.0.1")
        store.add([a, b])
        assert store.list(AclBindingFilter(permission=Permission.DENY)) == [b]
        assert store.list(AclBindingFilter(TOPIC, "orders", PatternType.LITERAL)) == [a, b]
        assert store.list(AclBindingFilter(GROUP)) == []

    def test_subscribers_hear_of_changes_only(self, store: AclStore) -> None:
        """A change calls every subscriber, even after one raised; a no-op calls none."""
        calls: list[str] = []

        def failing() -> None:
            calls.append("failing")
            raise RuntimeError("subscriber bug")

        store.subscribe(failing)
        store.subscribe(lambda: calls.append("second"))
        store.add([binding()])
        wait_for(lambda: calls.count("second") >= 1, what="the subscriber")
        seen = len(calls)
        store.add([binding()])
        store.remove(AclBindingFilter(principal="User:nobody"))
        time.sleep(0.2)
        assert len(calls) == seen

    def test_the_pattern_of_every_binding_survives(self, store: AclStore) -> None:
        """Every resource type, pattern type, operation and permission is stored as given."""
        acls = [binding(op=op, permission=perm) for op in Operation for perm in Permission]
        acls += [binding("kafka-cluster", kind=ResourceType.CLUSTER), binding("app", kind=GROUP, host="::1"),
                 binding("app-", kind=GROUP, pattern=PatternType.PREFIXED)]
        store.add(acls)
        assert store.all() == sorted(acls, key=AclBinding.sort_key)


class TestMemoryAclStore(AclStoreContract):
    @pytest.fixture
    def store(self) -> Iterator[AclStore]:
        s = MemoryAclStore()
        yield s
        s.close()


class TestFileAclStore(AclStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[AclStore]:
        s = FileAclStore(tmp_path, poll_interval=None)
        yield s
        s.close()


def test_the_file_is_private_json_in_a_dot_directory(tmp_path: Path) -> None:
    """<log.dir>/.security/acls.json, mode 0600 in a 0700 directory, one JSON object per ACL, no temp files left."""
    store = FileAclStore(tmp_path, poll_interval=None)
    store.add([binding()])
    path = tmp_path / ".security" / "acls.json"
    assert store.path == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"version": 1, "acls": [
        {"resourceType": "Topic", "name": "orders", "patternType": "LITERAL", "principal": "User:alice",
         "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert sorted(p.name for p in path.parent.iterdir()) == ["acls.json", "acls.lock"]
    assert FileAclStore(tmp_path, poll_interval=None).all() == [binding()]


def test_another_writer_is_seen_within_the_poll_interval(tmp_path: Path) -> None:
    """A broker's store polling the file sees a command's add and remove and tells its subscribers."""
    broker = FileAclStore(tmp_path, poll_interval=0.05)
    heard = threading.Event()
    broker.subscribe(heard.set)
    try:
        FileAclStore(tmp_path, poll_interval=None).add([binding()])
        assert heard.wait(5)
        assert broker.all() == [binding()]
        heard.clear()
        FileAclStore(tmp_path, poll_interval=None).remove(AclBindingFilter())
        assert heard.wait(5)
        assert broker.all() == []
    finally:
        broker.close()


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    """Four writers (own stores, as four commands would be) adding 25 ACLs each leave all 100 in the file."""
    def write(writer: int) -> None:
        store = FileAclStore(tmp_path, poll_interval=None)
        for i in range(25):
            store.add([binding(f"t{writer}-{i}")])

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(FileAclStore(tmp_path, poll_interval=None).all()) == 100


def test_a_writer_reads_the_file_afresh(tmp_path: Path) -> None:
    """A store that has not polled still keeps another's ACLs when it writes (read-modify-write under the lock)."""
    first = FileAclStore(tmp_path, poll_interval=None)
    FileAclStore(tmp_path, poll_interval=None).add([binding("a")])
    first.add([binding("b")])
    assert [b.pattern.name for b in FileAclStore(tmp_path, poll_interval=None).all()] == ["a", "b"]


def test_a_broken_file_is_refused_at_start_and_ignored_later(tmp_path: Path) -> None:
    """A file that is not ACLs stops a new store; a running one keeps its ACLs and logs the error once."""
    store = FileAclStore(tmp_path, poll_interval=None)
    store.add([binding()])
    store.path.write_text('{"version": 1, "acls": [{"name": "orders"}]}')
    with pytest.raises(ValueError, match="acls.json: not an ACL file"):
        FileAclStore(tmp_path, poll_interval=None)
    with capture_logs() as logs:
        assert not store.reload_if_changed()
        assert not store.reload_if_changed()
        store.path.write_text("")  # an editor's truncate, then its broken text: still one bad streak
        assert not store.reload_if_changed()
        store.path.write_text("{broken")
        assert not store.reload_if_changed()
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["acls.file_unreadable"]
    assert store.all() == [binding()]
    store.path.unlink()  # repaired in between ...
    FileAclStore(tmp_path, poll_interval=None).add([binding("b")])
    assert store.reload_if_changed()
    store.path.write_text("{broken")  # ... so breaking it again is a new streak, logged again
    with capture_logs() as logs:
        assert not store.reload_if_changed()
    assert [e["event"] for e in logs] == ["acls.file_unreadable"]


def test_a_deleted_file_means_no_acls(tmp_path: Path) -> None:
    """Removing acls.json by hand empties the ACLs at the next poll."""
    store = FileAclStore(tmp_path, poll_interval=None)
    store.add([binding()])
    os.unlink(store.path)
    assert store.reload_if_changed()
    assert store.all() == []

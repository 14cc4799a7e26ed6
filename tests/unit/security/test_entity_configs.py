"""Entity settings (rill.client.security.entity_configs*): paths, the memory and file stores, and the
SCRAM credentials kept in them (rill.client.security.scram_credentials)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.client.security.entity_configs import (EntityConfigError, EntityConfigs, MemoryEntityConfigs, entity_path,
                                                 parse_entity, validate_name)
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore

FAST = 0.02  # poll interval of the file stores in these tests


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture(params=["memory", "file"])
def configs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EntityConfigs]:
    """Each store the interface tests run against."""
    store: EntityConfigs = MemoryEntityConfigs() if request.param == "memory" else FileEntityConfigs(tmp_path, FAST)
    yield store
    store.close()


# -- paths and names ----------------------------------------------------------------------------

@pytest.mark.parametrize("path, parsed", [
    ("users/alice", ("alice", None)),
    ("clients/app-1", (None, "app-1")),
    ("users/alice/clients/app-1", ("alice", "app-1")),
    ("users/<default>", ("<default>", None)),
    ("users/<default>/clients/<default>", ("<default>", "<default>")),
    ("users/CN=alice, O=example", ("CN=alice, O=example", None)),
])
def test_entity_paths(path: str, parsed: tuple[str | None, str | None]) -> None:
    """The six entity forms parse, and entity_path builds them back."""
    assert parse_entity(path) == parsed
    assert entity_path(*parsed) == path


@pytest.mark.parametrize("path", ["users", "users/", "topics/t", "users/a/b", "clients/a/users/b", "users/a/clients",
                                  "users/.", "users/..", "users/a\nb", "users/" + "a" * 256, "users/a\ufff0"])
def test_invalid_entity_paths(path: str) -> None:
    """Other shapes and bad names are an EntityConfigError naming the problem."""
    with pytest.raises(EntityConfigError):
        parse_entity(path)


def test_names() -> None:
    """Names are 1..255 printable characters, no '/'; spaces and '@' are fine."""
    assert validate_name("alice@example.com") == "alice@example.com"
    assert validate_name("a" * 255)
    for bad in ("", "a/b", "\x00", "a" * 256):
        with pytest.raises(EntityConfigError):
            validate_name(bad)
    with pytest.raises(EntityConfigError):
        entity_path()


# -- the interface, against every store ---------------------------------------------------------

def test_alter_keeps_keys_it_does_not_touch(configs: EntityConfigs) -> None:
    """Setting one key keeps the others; deleting one keeps the rest; absent keys delete fine."""
    configs.alter("users/alice", set={"SCRAM-SHA-256": "cred", "producer_byte_rate": "1024"})
    configs.alter("users/alice", set={"consumer_byte_rate": "2048"}, delete=["SCRAM-SHA-256", "absent"])
    assert configs.get("users/alice") == {"producer_byte_rate": "1024", "consumer_byte_rate": "2048"}


def test_entity_without_keys_disappears(configs: EntityConfigs) -> None:
    """Deleting the last key removes the entity from entities()."""
    configs.alter("users/alice", set={"k": "v"})
    configs.alter("users/bob", set={"k": "v"})
    configs.alter("users/alice", delete=["k"])
    assert configs.get("users/alice") == {}
    assert configs.entities("users") == ["bob"]


def test_entities_by_type(configs: EntityConfigs) -> None:
    """entities() lists users (also those with only client sub-entities), clients, and a user's clients."""
    configs.alter("users/alice", set={"k": "1"})
    configs.alter("users/bob/clients/app", set={"k": "2"})
    configs.alter("users/<default>", set={"k": "3"})
    configs.alter("clients/app", set={"k": "4"})
    assert configs.entities("users") == ["<default>", "alice", "bob"]
    assert configs.entities("clients") == ["app"]
    assert configs.entities("users/bob/clients") == ["app"]
    assert configs.entities("users/alice/clients") == []
    assert configs.get("users/bob") == {} and configs.get("users/bob/clients/app") == {"k": "2"}
    with pytest.raises(EntityConfigError):
        configs.entities("topics")


def test_get_returns_a_copy(configs: EntityConfigs) -> None:
    """Changing what get() returned changes nothing in the store."""
    configs.alter("clients/app", set={"k": "v"})
    configs.get("clients/app")["k"] = "changed"
    assert configs.get("clients/app") == {"k": "v"}


def test_subscribers_hear_each_change(configs: EntityConfigs) -> None:
    """A subscriber gets the entity path after a change, and nothing for a no-op write."""
    heard: list[str] = []
    configs.subscribe(heard.append)
    configs.alter("users/alice", set={"k": "v"})
    configs.alter("users/alice", set={"k": "v"})
    configs.alter("users/alice/clients/app", set={"x": "1"})
    configs.alter("users/alice", delete=["k"])
    wait_until(lambda: len(heard) >= 3)
    assert heard == ["users/alice", "users/alice/clients/app", "users/alice"]


def test_bad_alters_are_refused(configs: EntityConfigs) -> None:
    """A key both set and deleted, an empty key, a non-string value, or a bad entity: EntityConfigError."""
    for entity, changes in [("users/a", {"set": {"k": "v"}, "delete": ["k"]}), ("users/a", {"set": {"": "v"}}),
                            ("users/a", {"set": {"k": 1}}), ("topics/t", {"set": {"k": "v"}})]:
        with pytest.raises(EntityConfigError):
            configs.alter(entity, **changes)  # type: ignore[arg-type]
    assert configs.entities("users") == []


def test_failing_subscriber_is_logged_not_raised() -> None:
    """One subscriber raising does not stop the write or the other subscribers."""
    store = MemoryEntityConfigs()
    heard: list[str] = []

    def broken(path: str) -> None:
        raise RuntimeError("boom")

    store.subscribe(broken)
    store.subscribe(heard.append)
    with capture_logs() as logs:
        store.alter("users/a", set={"k": "v"})
    assert heard == ["users/a"]
    assert [e["event"] for e in logs] == ["entity_configs.subscriber_failed"]


# -- the file store -----------------------------------------------------------------------------

def test_file_is_private_and_in_a_dot_directory(tmp_path: Path) -> None:
    """The file is <log.dir>/.security/entity-configs.json, mode 0600, in a 0700 directory, as documented."""
    with FileEntityConfigs(tmp_path, FAST) as store:
        store.alter("users/alice", set={"SCRAM-SHA-256": "cred"})
    path = tmp_path / ".security" / "entity-configs.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"version": 1, "entities": {"users/alice": {"SCRAM-SHA-256": "cred"}}}
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_no_file_reads_as_empty(tmp_path: Path) -> None:
    """A broker without users has no file and no settings, and opening creates nothing."""
    with FileEntityConfigs(tmp_path, FAST) as store:
        assert store.entities("users") == [] and store.get("users/alice") == {}
    assert not (tmp_path / ".security").exists()


def test_another_instances_change_reaches_subscribers(tmp_path: Path) -> None:
    """A change written by another store on the same directory is seen by the watcher and announced."""
    with FileEntityConfigs(tmp_path, FAST) as reader, FileEntityConfigs(tmp_path, FAST) as writer:
        heard: list[str] = []
        reader.subscribe(heard.append)
        writer.alter("users/alice", set={"k": "v"})
        wait_until(lambda: heard == ["users/alice"], timeout=2.0)
        assert reader.get("users/alice") == {"k": "v"}
        writer.alter("users/alice", delete=["k"])
        wait_until(lambda: heard == ["users/alice", "users/alice"], timeout=2.0)
        assert reader.entities("users") == []


def test_writes_of_two_instances_do_not_lose_updates(tmp_path: Path) -> None:
    """Each write reads the file's latest under the lock: a second instance's stale copy loses nothing."""
    with FileEntityConfigs(tmp_path, poll_interval=3600) as one, FileEntityConfigs(tmp_path, 3600) as two:
        one.alter("users/alice", set={"a": "1"})
        two.alter("users/alice", set={"b": "2"})
        assert one.get("users/alice") == {"a": "1"}  # not polled yet
        one.alter("users/alice", set={"c": "3"})
        assert one.get("users/alice") == {"a": "1", "b": "2", "c": "3"}


WRITER = textwrap.dedent("""
    import sys
    from rill.client.security.entity_configs_file import FileEntityConfigs
    store = FileEntityConfigs(sys.argv[1], poll_interval=3600)
    for i in range(int(sys.argv[3])):
        store.alter("users/alice", set={f"{sys.argv[2]}{i}": str(i)})
    store.close()
""")


def test_concurrent_writers_in_two_processes_lose_nothing(tmp_path: Path) -> None:
    """Two processes each adding 40 keys to one entity at the same time: all 80 are there."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), prefix, "40"], env=os.environ.copy())
             for prefix in ("x", "y")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with FileEntityConfigs(tmp_path, FAST) as store:
        assert store.get("users/alice") == {f"{p}{i}": str(i) for p in "xy" for i in range(40)}


def test_threads_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    """Threads of one process sharing a store also lose nothing."""
    with FileEntityConfigs(tmp_path, FAST) as store:
        def write(n: int) -> None:
            for i in range(10):
                store.alter("clients/app", set={f"{n}-{i}": "v"})

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(store.get("clients/app")) == 40


@pytest.mark.parametrize("content", [b"{not json", b"[]", b'{"version": 2, "entities": {}}',
                                     b'{"version": 1, "entities": {"topics/t": {}}}',
                                     b'{"version": 1, "entities": {"users/a": {"k": 1}}}'])
def test_corrupt_file_is_a_clear_error(tmp_path: Path, content: bytes) -> None:
    """Opening or writing a file that does not parse is an EntityConfigError naming the file, never a crash."""
    (tmp_path / ".security").mkdir()
    path = tmp_path / ".security" / "entity-configs.json"
    path.write_bytes(content)
    with pytest.raises(EntityConfigError, match="entity-configs.json"):
        FileEntityConfigs(tmp_path, FAST)


def test_corrupted_while_running_keeps_the_last_good_copy(tmp_path: Path) -> None:
    """The watcher logs a file that stopped parsing and keeps serving the last good settings; writes refuse it;
    once repaired, it is read again."""
    with FileEntityConfigs(tmp_path, FAST) as store:
        store.alter("users/alice", set={"k": "v"})
        path = tmp_path / ".security" / "entity-configs.json"
        with capture_logs() as logs:
            path.write_text("")  # an editor's truncate, seen by a poll before its write ...
            store.poll()
            path.write_text("{broken")  # ... then the broken text: one bad streak, one error
            wait_until(lambda: any(e["event"] == "entity_configs.unreadable" for e in logs))
            time.sleep(5 * FAST)
        assert [e["event"] for e in logs].count("entity_configs.unreadable") == 1  # once, not every poll
        assert store.get("users/alice") == {"k": "v"}
        with pytest.raises(EntityConfigError, match="not valid JSON"):
            store.alter("users/alice", set={"k": "w"})
        path.write_text(json.dumps({"version": 1, "entities": {"users/bob": {"k": "v"}}}))
        wait_until(lambda: store.entities("users") == ["bob"])


# -- SCRAM credentials in the store -------------------------------------------------------------

def test_credentials_round_trip_and_verify() -> None:
    """set_password stores Kafka's text under the mechanism's key; lookup parses it; the password verifies."""
    configs = MemoryEntityConfigs()
    store = CredentialStore(configs)
    store.set_password("alice", "secret", iterations=4096)
    assert configs.get("users/alice")["SCRAM-SHA-256"].startswith("salt=")
    credential = store.lookup("alice", "SCRAM-SHA-256")
    assert credential is not None and credential.iterations == 4096 and credential.verify_password("secret")
    assert store.lookup("alice", "SCRAM-SHA-512") is None
    assert store.lookup("bob", "SCRAM-SHA-256") is None
    assert store.lookup("bad/name", "SCRAM-SHA-256") is None
    assert store.lookup("alice", "PLAIN") is None


def test_credentials_keep_quota_keys() -> None:
    """Setting and deleting credentials leaves the user's other keys (quotas) alone."""
    configs = MemoryEntityConfigs({"users/alice": {"producer_byte_rate": "1024"}})
    store = CredentialStore(configs)
    store.set_password("alice", "pw", "SCRAM-SHA-512", 4096)
    assert set(configs.get("users/alice")) == {"producer_byte_rate", "SCRAM-SHA-512"}
    assert store.delete("alice")
    assert configs.get("users/alice") == {"producer_byte_rate": "1024"}
    assert store.users() == {}


def test_credentials_delete_one_mechanism_or_all() -> None:
    """delete(user, mechanism) removes one; delete(user) every one; an unknown user is False."""
    store = CredentialStore(MemoryEntityConfigs())
    store.set_password("alice", "pw", "SCRAM-SHA-256", 4096)
    store.set_password("alice", "pw", "SCRAM-SHA-512", 4096)
    assert store.users() == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    assert store.delete("alice", "SCRAM-SHA-512")
    assert not store.delete("alice", "SCRAM-SHA-512")
    assert store.users() == {"alice": ["SCRAM-SHA-256"]}
    assert store.delete("alice") and not store.delete("alice") and not store.delete("nobody")


def test_users_lists_mechanisms_never_secrets() -> None:
    """users() names users with a credential and their mechanisms; quota-only and default entities are left out."""
    configs = MemoryEntityConfigs({"users/<default>": {"producer_byte_rate": "1"},
                                   "users/q": {"request_percentage": "5"}})
    store = CredentialStore(configs)
    store.set_password("bob", "pw", iterations=4096)
    assert store.users() == {"bob": ["SCRAM-SHA-256"]}


def test_credential_refusals() -> None:
    """<default>, an invalid name, an unknown mechanism, an empty password, too few iterations: EntityConfigError."""
    store = CredentialStore(MemoryEntityConfigs())
    for args in [("<default>", "pw"), ("a/b", "pw"), ("alice", "")]:
        with pytest.raises(EntityConfigError):
            store.set_password(*args)
    with pytest.raises(EntityConfigError, match="mechanism"):
        store.set_password("alice", "pw", "SCRAM-SHA-1")
    with pytest.raises(EntityConfigError, match="4096"):
        store.set_password("alice", "pw", iterations=1000)


def test_unparsable_stored_credential_is_no_credential() -> None:
    """A stored credential that does not parse is logged and treated as absent (authentication fails)."""
    store = CredentialStore(MemoryEntityConfigs({"users/alice": {"SCRAM-SHA-256": "garbage"}}))
    with capture_logs() as logs:
        assert store.lookup("alice", "SCRAM-SHA-256") is None
    assert [e["event"] for e in logs] == ["scram.bad_stored_credential"]

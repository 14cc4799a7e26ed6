"""``rill acls add|remove|list`` through ``main()``: kafka-acls' flags and output, on a data dir and on ZooKeeper."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.security.authorizer import Authorizer
from rill.client.cli.main import main
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acl_store_zk import ZkAclStore
from rill.client.security.acls import Operation, PatternType, Permission, ResourceType
from tests.unit.security.test_acl_store import binding, wait_for

TOPIC_ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"


def entries(directory: Path) -> list[tuple[str, str, str, str, str]]:
    """(resource type, name, principal, operation, permission) of every ACL in the directory's file."""
    return [(b.pattern.type.value, b.pattern.name, b.entry.principal, b.entry.operation.value,
             b.entry.permission.value) for b in FileAclStore(directory, poll_interval=None).all()]


class TtyStdin(io.StringIO):
    """A terminal on which the user has typed the text given."""

    def isatty(self) -> bool:
        return True


def test_producer_acls_are_added_and_printed_as_kafka_acls_does(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--producer adds Write, Describe and Create; the output lists what was added, then the resource's ACLs."""
    assert main(["acls", "add", "--data-dir", str(tmp_path), "--allow-principal", "User:alice", "--producer",
                 "--topic", "orders"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        f"Adding ACLs for resource `{TOPIC_ORDERS}`:",
        "\t(principal=User:alice, host=*, operation=CREATE, permissionType=ALLOW)",
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
        "\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"]
    assert f"Current ACLs for resource `{TOPIC_ORDERS}`:" in out
    assert {e[3] for e in entries(tmp_path)} == {"Write", "Describe", "Create"}


def test_consumer_acls_cover_topics_and_group(tmp_path: Path) -> None:
    """--consumer: Read and Describe on each topic, Read on the group."""
    assert main(["acls", "add", "--data-dir", str(tmp_path), "--allow-principal", "User:bob", "--consumer",
                 "--topic", "a", "--topic", "b", "--group", "app"]) == 0
    assert sorted(entries(tmp_path)) == [
        ("Group", "app", "User:bob", "Read", "Allow"),
        ("Topic", "a", "User:bob", "Describe", "Allow"), ("Topic", "a", "User:bob", "Read", "Allow"),
        ("Topic", "b", "User:bob", "Describe", "Allow"), ("Topic", "b", "User:bob", "Read", "Allow")]


def test_producer_adds_nothing_on_a_group(tmp_path: Path) -> None:
    """--producer --consumer with a group: the producer's operations go to the topic only, never All on the group."""
    assert main(["acls", "add", "--data-dir", str(tmp_path), "--allow-principal", "User:a", "--producer",
                 "--consumer", "--topic", "t", "--group", "g"]) == 0
    assert sorted((e[0], e[3]) for e in entries(tmp_path)) == [
        ("Group", "Read"), ("Topic", "Create"), ("Topic", "Describe"), ("Topic", "Read"), ("Topic", "Write")]


def test_operations_hosts_and_patterns(tmp_path: Path) -> None:
    """Each --operation x host x principal is one ACL; --operation defaults to All; prefixes and denies."""
    d = str(tmp_path)
    assert main(["acls", "add", "--data-dir", d, "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
                 "--deny-host", "10.0.0.8", "--operation", "read", "--operation", "WRITE", "--topic", "ord",
                 "--resource-pattern-type", "prefixed"]) == 0
    assert main(["acls", "add", "--data-dir", d, "--allow-principal", "User:ops", "--cluster"]) == 0
    store = FileAclStore(tmp_path, poll_interval=None)
    denies = [b for b in store.all() if b.entry.permission is Permission.DENY]
    assert {(b.entry.host, b.entry.operation) for b in denies} == {
        (h, op) for h in ("10.0.0.9", "10.0.0.8") for op in (Operation.READ, Operation.WRITE)}
    assert {b.pattern.pattern_type for b in denies} == {PatternType.PREFIXED}
    assert binding("kafka-cluster", "User:ops", Operation.ALL, kind=ResourceType.CLUSTER) in store.all()


def test_list_filters_by_resource_pattern_and_principal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """list: everything by default; --topic with any (exact name) or match (what applies); --principal."""
    d = str(tmp_path)
    FileAclStore(tmp_path, poll_interval=None).add([
        binding("orders"), binding("*", "User:bob"), binding("ord", "User:carol", pattern=PatternType.PREFIXED),
        binding("app", "User:dave", kind=ResourceType.GROUP)])

    def listed(*flags: str) -> list[str]:
        capsys.readouterr()
        assert main(["acls", "list", "--data-dir", d, *flags]) == 0
        return [line.split("=", 1)[1].split(",")[0] for line in capsys.readouterr().out.splitlines()
                if line.startswith("\t")]

    assert sorted(listed()) == ["User:alice", "User:bob", "User:carol", "User:dave"]
    assert listed("--topic", "orders") == ["User:alice"]
    assert sorted(listed("--topic", "orders", "--resource-pattern-type", "match")) == [
        "User:alice", "User:bob", "User:carol"]
    assert listed("--principal", "User:dave") == ["User:dave"]
    assert listed("--group", "nothing") == []


def test_remove_without_a_terminal_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """remove asks on a terminal; without one and without --force it refuses and removes nothing."""
    FileAclStore(tmp_path, poll_interval=None).add([binding(), binding(principal="User:bob")])
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["acls", "remove", "--data-dir", str(tmp_path), "--topic", "orders"]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert len(entries(tmp_path)) == 2
    monkeypatch.setattr("sys.stdin", TtyStdin("n\n"))
    assert main(["acls", "remove", "--data-dir", str(tmp_path), "--topic", "orders"]) == 0
    assert len(entries(tmp_path)) == 2
    monkeypatch.setattr("sys.stdin", TtyStdin("y\n"))
    assert main(["acls", "remove", "--data-dir", str(tmp_path), "--topic", "orders",
                 "--allow-principal", "User:bob"]) == 0
    captured = capsys.readouterr()
    assert "Are you sure you want to remove these 1 ACL(s)? (y/N)" in captured.err
    assert f"Removed ACLs for resource `{TOPIC_ORDERS}`:" in captured.out
    assert [e[2] for e in entries(tmp_path)] == ["User:alice"]


def test_remove_force_filters_by_the_flags_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--operation narrows a remove; without a principal every ACL of the resource goes."""
    d = str(tmp_path)
    FileAclStore(tmp_path, poll_interval=None).add([
        binding(), binding(op=Operation.WRITE), binding("other"), binding("app", kind=ResourceType.GROUP)])
    assert main(["acls", "remove", "--data-dir", d, "--topic", "orders", "--allow-principal", "User:alice",
                 "--operation", "Write", "--force"]) == 0
    assert ("Topic", "orders", "User:alice", "Read", "Allow") in entries(tmp_path)
    assert main(["acls", "remove", "--data-dir", d, "--topic", "orders", "--group", "app", "--force"]) == 0
    assert entries(tmp_path) == [("Topic", "other", "User:alice", "Read", "Allow")]
    assert main(["acls", "remove", "--data-dir", d, "--topic", "orders", "--force"]) == 0
    assert "nothing removed" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--allow-principal", "User:a"], "name at least one resource"),
    (["--topic", "t"], "--allow-principal or --deny-principal"),
    (["--allow-principal", "User:a", "--group", "g", "--operation", "Write"], "Write does not apply to a Group"),
    (["--allow-principal", "User:a", "--topic", "a/b"], "invalid topic name"),
    (["--allow-principal", "User:a", "--consumer", "--topic", "t"], "--consumer --topic and --group"),
    (["--allow-principal", "User:a", "--producer", "--topic", "t", "--operation", "Read"], "no --operation"),
    (["--deny-host", "10.0.0.1", "--allow-principal", "User:a", "--topic", "t"], "--deny-host needs --deny-principal"),
    (["--allow-principal", "alice", "--topic", "t"], "Type:name"),
    (["--allow-principal", "User:a", "--allow-host", "example.com", "--topic", "t"], "IP address"),
    (["--allow-principal", "User:a", "--operation", "frobnicate", "--topic", "t"], "unknown Operation"),
])
def test_bad_usage_is_exit_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
                                    message: str) -> None:
    """Mistakes in the flags are usage errors with a one-line reason, and nothing is written."""
    assert main(["acls", "add", "--data-dir", str(tmp_path), *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / ".security" / "acls.json").exists()


def test_exactly_one_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Neither --data-dir nor --zookeeper, or both, is a usage error; a missing data dir an error."""
    assert main(["acls", "list"]) == 2
    assert main(["acls", "list", "--data-dir", str(tmp_path), "--zookeeper", "localhost:2181"]) == 2
    capsys.readouterr()
    assert main(["acls", "list", "--data-dir", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.startswith("rill: error: no such directory")


def test_a_broken_acl_file_is_an_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt acls.json gives one rill: error: line naming it."""
    (tmp_path / ".security").mkdir()
    (tmp_path / ".security" / "acls.json").write_text("{")
    assert main(["acls", "list", "--data-dir", str(tmp_path)]) == 1
    assert "acls.json: not an ACL file" in capsys.readouterr().err


def test_a_running_brokers_authorizer_follows_the_command(tmp_path: Path) -> None:
    """rill acls add while a broker's authorizer polls the file takes effect within the poll interval."""
    authorizer = Authorizer(store := FileAclStore(tmp_path, poll_interval=0.05))
    try:
        assert not authorizer.authorize("User:alice", "10.0.0.1", Operation.WRITE, ResourceType.TOPIC, "orders")
        assert main(["acls", "add", "--data-dir", str(tmp_path), "--allow-principal", "User:alice", "--producer",
                     "--topic", "orders"]) == 0
        wait_for(lambda: authorizer.authorize("User:alice", "10.0.0.1", Operation.WRITE, ResourceType.TOPIC,
                                              "orders"), timeout=5, what="the authorizer")
    finally:
        store.close()


def test_acls_in_zookeeper(zk_connect: str, zk: KazooClient, capsys: pytest.CaptureFixture[str]) -> None:
    """--zookeeper writes Kafka's nodes, which a broker's store hears of; list and remove read them back."""
    broker = ZkAclStore(zk)
    try:
        assert main(["acls", "add", "--zookeeper", zk_connect, "--allow-principal", "User:alice", "--operation",
                     "Read", "--topic", "orders", "--group", "app"]) == 0
        assert json.loads(zk.get("/kafka-acl/Topic/orders")[0])["acls"] == [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]
        wait_for(lambda: len(broker.all()) == 2, what="the broker's store")
        capsys.readouterr()
        assert main(["acls", "list", "--zookeeper", zk_connect, "--topic", "orders"]) == 0
        assert capsys.readouterr().out.splitlines()[:2] == [
            f"Current ACLs for resource `{TOPIC_ORDERS}`:",
            "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"]
        assert main(["acls", "remove", "--zookeeper", zk_connect, "--group", "app", "--force"]) == 0
        wait_for(lambda: [b.pattern.type for b in broker.all()] == [ResourceType.TOPIC], what="the removal")
        assert zk.exists("/kafka-acl/Group/app") is None
    finally:
        broker.close()


def test_an_unreachable_zookeeper_is_an_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    """No ZooKeeper at the address: one rill: error: line after --timeout."""
    assert main(["acls", "list", "--zookeeper", "127.0.0.1:1", "--timeout", "0.5"]) == 1
    assert capsys.readouterr().err.startswith("rill: error: cannot connect to ZooKeeper at 127.0.0.1:1:")

"""``rill quotas set|list`` on a broker's entity file and on ZooKeeper, through ``rill.client.cli.main.main``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.security.quota_manager import QuotaManager, ResolvedQuota
from rill.client.cli import quotas, security_stores
from rill.client.cli.main import main
from rill.client.security.entity_configs_file import FileEntityConfigs

HEADER = "ENTITY\tproducer_byte_rate\tconsumer_byte_rate\trequest_percentage\tpartitions_created_max"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_set_then_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Quotas set on users, client ids and both are listed one row per entity, '-' where unset."""
    store = ["--data-dir", str(tmp_path)]
    assert run(capsys, "quotas", "set", "--user", "alice", "--producer-byte-rate", "1024", *store)[0] == 0
    assert run(capsys, "quotas", "set", "--user-default", "--client-default", "--consumer-byte-rate", "2048",
               "--request-percentage", "12.5", *store)[0] == 0
    assert run(capsys, "quotas", "set", "--client-id", "etl", "--request-percentage", "50", *store)[0] == 0
    code, out, _ = run(capsys, "quotas", "set", "--user-default", "--partitions-max", "100", *store)
    assert code == 0 and out == "Completed updating quotas of users/<default>: partitions_created_max=100.\n"
    code, out, err = run(capsys, "quotas", "list", *store)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        HEADER,
        "clients/etl\t-\t-\t50\t-",
        "users/<default>\t-\t-\t-\t100",
        "users/<default>/clients/<default>\t-\t2048\t12.5\t-",
        "users/alice\t1024\t-\t-\t-",
    ]


def test_set_keeps_the_keys_it_does_not_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Setting and deleting quotas leaves the user's SCRAM credential and its other quotas in place."""
    with FileEntityConfigs(tmp_path) as configs:
        configs.alter("users/alice", {"SCRAM-SHA-256": "salt=c2FsdA==,iterations=4096"})
    store = ["--data-dir", str(tmp_path)]
    assert run(capsys, "quotas", "set", "--user", "alice", "--producer-byte-rate", "1000",
               "--consumer-byte-rate", "3000", *store)[0] == 0
    code, out, _ = run(capsys, "quotas", "set", "--user", "alice", "--delete", "producer_byte_rate", *store)
    assert code == 0 and out == "Completed updating quotas of users/alice: consumer_byte_rate=3000.\n"
    with FileEntityConfigs(tmp_path) as configs:
        assert configs.get("users/alice") == {"SCRAM-SHA-256": "salt=c2FsdA==,iterations=4096",
                                              "consumer_byte_rate": "3000"}
    code, out, _ = run(capsys, "quotas", "set", "--user", "alice", "--delete", "consumer_byte_rate", *store)
    assert out.endswith("no quotas.\n")
    code, out, err = run(capsys, "quotas", "list", *store)
    assert out == HEADER + "\n" and err == "No quotas.\n"


def test_list_keeps_the_entities_of_a_user_or_client_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--user and --client-id select the entities naming them; <default> selects the default ones."""
    store = ["--data-dir", str(tmp_path)]
    for entity in (["--user", "alice"], ["--user", "alice", "--client-id", "etl"], ["--client-id", "etl"],
                   ["--user", "bob", "--client-default"], ["--client-default"]):
        assert run(capsys, "quotas", "set", *entity, "--producer-byte-rate", "10", *store)[0] == 0

    def rows(*flags: str) -> list[str]:
        return [line.split("\t")[0] for line in run(capsys, "quotas", "list", *flags, *store)[1].splitlines()[1:]]

    assert rows("--user", "alice") == ["users/alice", "users/alice/clients/etl"]
    assert rows("--client-id", "etl") == ["clients/etl", "users/alice/clients/etl"]
    assert rows("--user", "alice", "--client-id", "etl") == ["users/alice/clients/etl"]
    assert rows("--client-id", "<default>") == ["clients/<default>", "users/bob/clients/<default>"]


@pytest.mark.parametrize("argv, message", [
    (["--user", "alice", "--producer-byte-rate", "-5"], "quota producer_byte_rate: expected a number > 0, got '-5'"),
    (["--user", "alice", "--producer-byte-rate", "1.5"], "quota producer_byte_rate: expected a whole number"),
    (["--user", "alice", "--request-percentage", "lots"], "quota request_percentage: expected a number, got 'lots'"),
    (["--user", "alice", "--request-percentage", "nan"], "quota request_percentage: expected a number > 0"),
    (["--user", "alice"], "nothing to change"),
    (["--producer-byte-rate", "5"], "name the entity"),
    (["--user", "a/b", "--producer-byte-rate", "5"], "invalid user name 'a/b'"),
    (["--client-id", "etl", "--partitions-max", "5"], "quota partitions_created_max applies to users only"),
    (["--user", "alice", "--client-default", "--partitions-max", "5"], "not to users/alice/clients/<default>"),
    (["--user", "alice", "--producer-byte-rate", "5", "--delete", "producer_byte_rate"],
     "quota producer_byte_rate is both set and deleted"),
])
def test_bad_settings_are_refused_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    """A bad value, a missing entity or a misplaced key is one 'rill: error:' line, exit 2, and no file."""
    code, out, err = run(capsys, "quotas", "set", *argv, "--data-dir", str(tmp_path))
    assert code == 2 and out == ""
    assert err.startswith("rill: error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / ".security").exists()


@pytest.mark.parametrize("action", ["set", "list"])
def test_help_names_every_flag(capsys: pytest.CaptureFixture[str], action: str) -> None:
    """--help prints the action's flags and exits 0."""
    code, out, _ = run(capsys, "quotas", action, "--help")
    assert code == 0 and "--data-dir" in out and "--zookeeper" in out
    assert action == "list" or all(flag in out for flag, _, _ in quotas.SET_FLAGS)


def test_the_store_is_named_exactly_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Neither or both of --data-dir and --zookeeper is bad usage; a missing data directory is an error."""
    assert run(capsys, "quotas", "list")[0] == 2
    assert run(capsys, "quotas", "list", "--data-dir", str(tmp_path), "--zookeeper", "127.0.0.1:1")[0] == 2
    assert run(capsys, "quotas", "set", "--user", "a", "--delete", "bogus", "--data-dir", str(tmp_path))[0] == 2
    code, _, err = run(capsys, "quotas", "list", "--data-dir", str(tmp_path / "absent"))
    assert code == 1 and err.startswith("rill: error: data directory ") and "does not exist" in err


def test_a_quota_set_on_the_file_reaches_a_broker_following_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A quota manager following the broker's entity file applies a quota the CLI sets, and its deletion."""
    with FileEntityConfigs(tmp_path, poll_interval=3600) as configs:
        manager = QuotaManager()
        manager.follow(configs)
        assert manager.quotas_for("alice", "app") == {}
        assert run(capsys, "quotas", "set", "--user", "alice", "--producer-byte-rate", "1000",
                   "--data-dir", str(tmp_path))[0] == 0
        configs.poll()
        assert manager.quotas_for("alice", "app") == {
            "producer_byte_rate": ResolvedQuota("users/alice", "users/alice", 1000.0)}
        assert run(capsys, "quotas", "set", "--user", "alice", "--delete", "producer_byte_rate",
                   "--data-dir", str(tmp_path))[0] == 0
        configs.poll()
        assert manager.quotas_for("alice", "app") == {}


def test_quotas_in_zookeeper_use_kafkas_layout(zk_connect: str, zk: KazooClient,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """With --zookeeper the quotas land in /config/users/... as Kafka writes them, and list reads them back."""
    store = ["--zookeeper", zk_connect]
    assert run(capsys, "quotas", "set", "--user", "alice", "--client-id", "etl", "--producer-byte-rate", "1024",
               *store)[0] == 0
    assert run(capsys, "quotas", "set", "--client-default", "--request-percentage", "25", *store)[0] == 0
    data, _ = zk.get("/config/users/alice/clients/etl")
    assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1024"}}
    code, out, _ = run(capsys, "quotas", "list", *store)
    assert code == 0
    assert out.splitlines() == [HEADER, "clients/<default>\t-\t-\t25\t-", "users/alice/clients/etl\t1024\t-\t-\t-"]


def test_an_unreachable_zookeeper_is_an_error(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZooKeeper that cannot be reached is one 'rill: error:' line and exit 1."""
    monkeypatch.setattr(security_stores, "ZK_TIMEOUT_S", 0.5)
    code, _, err = run(capsys, "quotas", "list", "--zookeeper", "127.0.0.1:1")
    assert code == 1 and err.startswith("rill: error: cannot connect to ZooKeeper at 127.0.0.1:1")

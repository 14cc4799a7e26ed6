"""``rill users add|delete|list --data-dir`` (rill.client.cli.users), through ``rill``'s main()."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rill.client.cli.main import main
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from tests.unit.security.test_entity_configs import wait_until

Capture = pytest.CaptureFixture[str]


def users_file(data_dir: Path) -> dict[str, dict[str, str]]:
    entities: dict[str, dict[str, str]] = json.loads((data_dir / ".security" / "entity-configs.json").read_text())[
        "entities"]
    return entities


def rill_users(data_dir: Path, *args: str) -> int:
    return main(["users", *args, "--data-dir", str(data_dir)])


def test_add_list_delete(tmp_path: Path, capsys: Capture) -> None:
    """add stores a credential that verifies, list shows names and mechanisms only, delete removes it."""
    assert rill_users(tmp_path, "add", "alice", "--password", "s3cret", "--iterations", "4096") == 0
    assert capsys.readouterr().out == "Added SCRAM-SHA-256 credential for user alice.\n"
    with FileEntityConfigs(tmp_path) as configs:
        credential = CredentialStore(configs).lookup("alice", "SCRAM-SHA-256")
    assert credential is not None and credential.iterations == 4096 and credential.verify_password("s3cret")
    assert rill_users(tmp_path, "add", "bob", "--password", "pw", "--mechanism", "SCRAM-SHA-512") == 0
    assert rill_users(tmp_path, "add", "bob", "--password", "pw2", "--mechanism", "SCRAM-SHA-512") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "Updated SCRAM-SHA-512 credential for user bob."
    assert rill_users(tmp_path, "list") == 0
    listing = capsys.readouterr().out
    assert listing == "NAME\tMECHANISMS\nalice\tSCRAM-SHA-256\nbob\tSCRAM-SHA-512\n"
    assert "salt" not in listing and "s3cret" not in listing
    assert rill_users(tmp_path, "delete", "alice") == 0
    assert capsys.readouterr().out == "Deleted SCRAM-SHA-256 credential of user alice.\n"
    assert list(users_file(tmp_path)) == ["users/bob"]


def test_delete_unknown_user_or_mechanism(tmp_path: Path, capsys: Capture) -> None:
    """Deleting a user that does not exist, or a mechanism it does not have, is exit 1 with a clear line."""
    assert rill_users(tmp_path, "delete", "carol") == 1
    assert capsys.readouterr().err == "rill: error: user 'carol' does not exist (rill users list shows the users)\n"
    rill_users(tmp_path, "add", "alice", "--password", "pw")
    assert rill_users(tmp_path, "delete", "alice", "--mechanism", "SCRAM-SHA-512") == 1
    assert "user 'alice' has no SCRAM-SHA-512 credential" in capsys.readouterr().err


def test_delete_keeps_quotas(tmp_path: Path) -> None:
    """Deleting a user's credentials leaves its other settings (quotas) in place."""
    with FileEntityConfigs(tmp_path) as configs:
        configs.alter("users/alice", set={"producer_byte_rate": "1024"})
    rill_users(tmp_path, "add", "alice", "--password", "pw")
    assert set(users_file(tmp_path)["users/alice"]) == {"producer_byte_rate", "SCRAM-SHA-256"}
    assert rill_users(tmp_path, "delete", "alice") == 0
    assert users_file(tmp_path) == {"users/alice": {"producer_byte_rate": "1024"}}


def test_password_file(tmp_path: Path) -> None:
    """--password-file takes the file's first line, without its line ending."""
    secret = tmp_path / "pw.txt"
    secret.write_text("from-file\r\nsecond line\n")
    assert rill_users(tmp_path, "add", "alice", "--password-file", str(secret)) == 0
    with FileEntityConfigs(tmp_path) as configs:
        credential = CredentialStore(configs).lookup("alice", "SCRAM-SHA-256")
    assert credential is not None and credential.verify_password("from-file")


def test_password_from_stdin_when_not_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a password flag and with stdin not a terminal, one line is read from stdin."""
    monkeypatch.setattr("sys.stdin", io.StringIO("piped pw\nignored\n"))
    assert rill_users(tmp_path, "add", "alice") == 0
    with FileEntityConfigs(tmp_path) as configs:
        credential = CredentialStore(configs).lookup("alice", "SCRAM-SHA-256")
    assert credential is not None and credential.verify_password("piped pw")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_password_prompted_twice_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: Capture) -> None:
    """On a terminal the password is asked twice with getpass; two different answers are an error."""
    answers = iter(["typed", "typed", "one", "two"])
    prompts: list[str] = []
    monkeypatch.setattr("sys.stdin", Terminal())

    def getpass(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr("getpass.getpass", getpass)
    assert rill_users(tmp_path, "add", "alice") == 0
    assert prompts == ["Password for alice: ", "Again: "]
    assert rill_users(tmp_path, "add", "bob") == 1
    assert capsys.readouterr().err == "rill: error: the two passwords differ\n"


@pytest.mark.parametrize("args, code, message", [
    (["add", "alice", "--password", ""], 1, "the password is empty"),
    (["add", "alice", "--password", "pw", "--iterations", "1000"], 1, "--iterations must be 4096..16384"),
    (["add", "alice", "--password-file", "/nonexistent/pw"], 1, "cannot read the password file"),
    (["add", "<default>", "--password", "pw"], 2, "default user entity"),
    (["add", "a/b", "--password", "pw"], 2, "invalid user name"),
    (["add", "alice", "--password", "pw", "--mechanism", "SCRAM-SHA-1"], 2, "invalid choice"),
])
def test_refusals(tmp_path: Path, capsys: Capture, args: list[str], code: int, message: str) -> None:
    """Bad passwords, iterations, names and mechanisms: an error line and exit 1 (2 for usage), no traceback."""
    assert rill_users(tmp_path, *args) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / ".security" / "entity-configs.json").exists()


def test_store_flag_is_required_and_exclusive(tmp_path: Path, capsys: Capture) -> None:
    """Exactly one of --data-dir and --zookeeper: none or both is a usage error (exit 2)."""
    assert main(["users", "list"]) == 2
    assert "one of the arguments --data-dir --zookeeper is required" in capsys.readouterr().err
    assert main(["users", "list", "--data-dir", str(tmp_path), "--zookeeper", "localhost:2181"]) == 2


def test_missing_data_dir_and_corrupt_file(tmp_path: Path, capsys: Capture) -> None:
    """A data directory that does not exist, or a users file that does not parse: one error line, exit 1."""
    assert main(["users", "list", "--data-dir", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / ".security").mkdir()
    (tmp_path / ".security" / "entity-configs.json").write_text("{oops")
    assert rill_users(tmp_path, "add", "alice", "--password", "pw") == 1
    err = capsys.readouterr().err
    assert err.startswith("rill: error: ") and "entity-configs.json: not valid JSON" in err


def test_list_without_users(tmp_path: Path, capsys: Capture) -> None:
    """No users: the header only on stdout, and a note on stderr."""
    assert rill_users(tmp_path, "list") == 0
    captured = capsys.readouterr()
    assert captured.out == "NAME\tMECHANISMS\n" and captured.err == "No users.\n"


def test_running_broker_store_sees_the_cli_change(tmp_path: Path) -> None:
    """A store a broker holds open on the same log.dir sees a user added by the CLI within its poll interval."""
    with FileEntityConfigs(tmp_path, poll_interval=0.02) as configs:
        heard: list[str] = []
        configs.subscribe(heard.append)
        assert rill_users(tmp_path, "add", "alice", "--password", "pw") == 0
        wait_until(lambda: heard == ["users/alice"], timeout=2.0)
        assert CredentialStore(configs).lookup("alice", "SCRAM-SHA-256") is not None

"""``--command-config`` for the perf harnesses (security_settings) and the ACLs ``rill perf security`` grants."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rill.client.cli.command_config import security_of, security_settings
from rill.client.cli.common import CliError
from rill.client.cli.main import build_parser
from rill.client.cli.perf.security_overhead import acl_commands


def test_security_settings_are_the_files_settings_unparsed(tmp_path: Path) -> None:
    """The Producer and Consumer get the file's settings as written; without the option, none."""
    config = tmp_path / "sasl.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.plain.username=alice\nsasl.plain.password=a=b\n"
                      "ssl.check.hostname=false\n")
    args = argparse.Namespace(command_config=str(config))
    assert security_settings(args) == {"security.protocol": "SASL_PLAINTEXT", "sasl.plain.username": "alice",
                                       "sasl.plain.password": "a=b", "ssl.check.hostname": "false"}
    assert security_settings(argparse.Namespace(command_config=None)) == {}
    assert security_settings(argparse.Namespace()) == {}
    security = security_of(args)
    assert security is not None and security.username == "alice" and security.password == "a=b"


def test_security_settings_refuse_a_setting_that_is_not_a_security_setting(tmp_path: Path) -> None:
    """A producer setting in the file is refused by name, before any client is built with it."""
    config = tmp_path / "bad.properties"
    config.write_text("security.protocol=SSL\nlinger.ms=5\n")
    with pytest.raises(CliError, match="unknown settings linger.ms"):
        security_settings(argparse.Namespace(command_config=str(config)))


@pytest.mark.parametrize("kind", ["produce", "consume", "latency", "consumer-api", "e2e"])
def test_every_data_plane_perf_benchmark_takes_command_config(kind: str) -> None:
    """The five benchmarks of the hot paths accept --command-config (TLS and SASL listeners)."""
    args = build_parser().parse_args(["perf", kind, "-t", "x", "--command-config", "tls.properties"])
    assert args.command_config == "tls.properties"


def _acls_granted(command: list[str]) -> int:
    """How many ACLs one ``rill acls add`` grants: principals x operations x resources."""
    args = build_parser().parse_args(command)
    principals = len(args.allow_principal or [])
    operations = len(args.operation or []) or 1
    resources = len(args.topic or []) + len(args.group or []) + (1 if getattr(args, "cluster", False) else 0)
    return principals * operations * resources


@pytest.mark.parametrize("count", [14, 15, 16, 100, 250])
def test_acl_commands_grant_exactly_the_number_asked(count: int) -> None:
    """The benchmarks' own 14 ACLs come first; others make up the count exactly."""
    commands = acl_commands("/data", count)
    assert sum(_acls_granted(c) for c in commands) == count
    own = build_parser().parse_args(commands[0])
    assert [str(p) for p in own.allow_principal] == ["User:ANONYMOUS"]
    assert sorted(str(getattr(o, "name", o)).lower() for o in own.operation) == ["create", "read", "write"]
    assert all(c[:2] == ["acls", "add"] and c[c.index("--data-dir") + 1] == "/data" for c in commands)


def test_acl_commands_refuse_fewer_than_the_benchmarks_need() -> None:
    with pytest.raises(CliError, match="at least 14"):
        acl_commands("/data", 13)

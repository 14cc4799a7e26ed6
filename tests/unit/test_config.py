"""Broker configuration: defaults, TOML (quoted and dotted keys), flags, and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.broker.config import KEYS, BrokerConfig, ConfigError


def test_defaults_match_kafka() -> None:
    """Without a file or flags the Kafka defaults apply."""
    c = BrokerConfig.load()
    assert c["port"] == 9092
    assert c["log.segment.bytes"] == 1024 ** 3
    assert c["socket.request.max.bytes"] == 100 * 1024 * 1024
    assert c["message.max.bytes"] == 1_000_000
    assert c["log.retention.hours"] == 168


def test_toml_quoted_and_dotted_keys_and_flag_override(tmp_path: Path) -> None:
    """A TOML file may quote or dot keys; flags override the file."""
    path = tmp_path / "broker.toml"
    path.write_text('"log.segment.bytes" = 4096\nnum.partitions = 3\nport = 1234\n')
    c = BrokerConfig.load(path, {"port": "5555"})
    assert (c["log.segment.bytes"], c["num.partitions"], c["port"]) == (4096, 3, 5555)
    assert c.log_config().segment_bytes == 4096


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    """A misspelt key is refused rather than silently ignored."""
    path = tmp_path / "broker.toml"
    path.write_text("log.segmnet.bytes = 4096\n")
    with pytest.raises(ConfigError, match="log.segmnet.bytes"):
        BrokerConfig.load(path)


def test_bad_values_are_errors() -> None:
    """Values of the wrong type, or storage settings out of range, are refused with a message."""
    with pytest.raises(ConfigError, match="port"):
        BrokerConfig.load(None, {"port": "ninety"})
    with pytest.raises(ConfigError):
        BrokerConfig.load(None, {"log.segment.bytes": 10})


def test_every_key_is_documented() -> None:
    """docs/operations.md lists every configuration key."""
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    missing = [k.name for k in KEYS if f"`{k.name}`" not in doc]
    assert not missing


def test_sync_grpc_server_needs_a_worker_per_waiting_member() -> None:
    """With the sync gRPC server, a group limit that the worker pool cannot hold is refused at start-up."""
    assert BrokerConfig.load()["grpc.max.workers"] > BrokerConfig.load()["group.max.size"]
    with pytest.raises(ConfigError, match="grpc.max.workers"):
        BrokerConfig.load(None, {"grpc.max.workers": 100, "group.max.size": 200})
    assert BrokerConfig.load(None, {"grpc.max.workers": 100, "group.max.size": 200, "grpc.server": "aio"})


@pytest.mark.parametrize("overrides, message", [
    ({"num.partitions": 11, "num.partitions.max": 10}, "num.partitions"),
    ({"num.partitions.max": 200_000}, "max.broker.partitions"),
    ({"num.partitions.max": 0}, "num.partitions.max"),
    ({"log.open.files.max": 3}, "log.open.files.max"),
])
def test_partition_and_file_limits_must_be_consistent(overrides, message) -> None:
    """Limits that contradict each other are refused at start-up, naming the key."""
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.load(None, overrides)

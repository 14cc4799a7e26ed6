"""Producer settings: Kafka names or keyword arguments, errors for unknown keys and bad values, documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from rill.client.client_config import ConfigError
from rill.client.producer import Producer
from rill.client.producer.producer import SETTINGS


def test_keyword_arguments_win_over_the_mapping() -> None:
    """linger_ms=7 overrides "linger.ms" from the mapping; other keys keep their defaults."""
    with Producer({"linger.ms": 3, "acks": "fsync"}, linger_ms=7, bootstrap_servers="127.0.0.1:1") as p:
        assert (p.config["linger.ms"], p.config["acks"], p.config["batch.size"]) == (7, "fsync", 65536)
        assert p.config["bootstrap.servers"] == [("127.0.0.1", 1)]


@pytest.mark.parametrize("settings", [{"lingr.ms": 5}, {"acks": "quorum"}, {"batch.size": 0}, {"retries": -1},
                                      {"partitioner": "sticky"}, {"value.serializer": 5}])
def test_unknown_keys_and_bad_values_raise_config_error(settings: dict[str, object]) -> None:
    """A misspelt key or an out-of-range value is refused, naming the key, before anything starts."""
    with pytest.raises(ConfigError, match=next(iter(settings))):
        Producer(settings)


def test_every_setting_is_documented() -> None:
    """docs/clients.md lists every producer setting with its default."""
    doc = (Path(__file__).parents[3] / "docs" / "clients.md").read_text()
    section = doc[doc.index("## Producer"):]
    missing = [s.name for s in SETTINGS if f"| `{s.name}` |" not in section]
    assert not missing

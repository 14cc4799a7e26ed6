"""Consumer settings: defaults, both spellings, and refusals."""

from __future__ import annotations

import pytest

from rill.client.client_config import ConfigError
from rill.client.consumer.settings import consumer_settings


def test_defaults_and_both_spellings() -> None:
    """Dotted keys in a mapping and underscored keywords mean the same; keywords win."""
    s = consumer_settings({"group.id": "a", "fetch.max.wait.ms": 50}, {"group_id": "b"})
    assert s["group.id"] == "b" and s["fetch.max.wait.ms"] == 50
    assert s["enable.auto.commit"] is True and s["auto.commit.interval.ms"] == 5000
    assert s["session.timeout.ms"] == 10_000 and s["heartbeat.interval.ms"] == 3000
    assert s["max.poll.records"] == 500 and s["auto.offset.reset"] == "earliest"
    assert s["bootstrap.servers"] == [("localhost", 9092)]


def test_bad_values_are_refused_by_name() -> None:
    """Unknown keys, bad choices and a heartbeat not below the session timeout are ConfigErrors."""
    with pytest.raises(ConfigError, match="auto.offset.reset"):
        consumer_settings({"auto.offset.reset": "smallest"}, {})
    with pytest.raises(ConfigError, match="unknown setting 'group.idd'"):
        consumer_settings({"group.idd": "x"}, {})
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        consumer_settings({"session.timeout.ms": 1000, "heartbeat.interval.ms": 1000}, {})
    with pytest.raises(ConfigError, match="value.deserializer"):
        consumer_settings({"value.deserializer": "json"}, {})

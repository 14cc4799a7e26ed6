"""A topic's log settings over the broker's (retention.ms, retention.bytes, segment.bytes)."""

from __future__ import annotations

from rill.broker.cluster.topic_config import topic_config_problem
from rill.broker.log.log_config import LogConfig
from rill.broker.log.topic_log_settings import log_settings_of, with_topic_settings

BASE = LogConfig(segment_bytes=1 << 30, retention_ms=7 * 86_400_000, retention_bytes=-1)


def test_settings_replace_the_brokers_fields_and_nothing_else() -> None:
    config = with_topic_settings(BASE, {"retention.ms": "-1", "retention.bytes": "0", "segment.bytes": "2048"})
    assert (config.retention_ms, config.retention_bytes, config.segment_bytes) == (-1, 0, 2048)
    assert config.max_message_bytes == BASE.max_message_bytes and config.roll_ms == BASE.roll_ms
    assert with_topic_settings(BASE, {}) is BASE
    assert with_topic_settings(BASE, {"min.insync.replicas": "2"}) is BASE  # not a log setting


def test_only_the_log_settings_travel_with_a_role_sorted() -> None:
    assert log_settings_of({"segment.bytes": "4096", "min.insync.replicas": "2", "retention.ms": "5"}) == (
        ("retention.ms", "5"), ("segment.bytes", "4096"))


def test_values_are_checked_as_kafka_bounds_them() -> None:
    assert topic_config_problem({"retention.ms": "-1", "retention.bytes": "-1", "segment.bytes": "1024"}, 3) is None
    for key, value in [("retention.ms", "0"), ("retention.ms", "-2"), ("retention.bytes", "-5"),
                       ("segment.bytes", "1023"), ("segment.bytes", "2147483648"), ("retention.ms", "1h"),
                       ("retention.bytes", "")]:
        assert topic_config_problem({key: value}, 3) is not None, (key, value)

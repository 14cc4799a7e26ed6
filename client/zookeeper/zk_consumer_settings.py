"""The ZooKeeper consumer's settings: Kafka 0.7's names and defaults.

``ZkConsumer(zookeeper="zk:2181/kafka", group="app", autooffset_reset="smallest")``, or the
same keys dotted in a mapping (``{"autooffset.reset": "smallest"}``); keywords win and
unknown keys raise ConfigError (see :mod:`rill.client.client_config`). ``zookeeper`` and
``group`` are 0.7's ``zk.connect`` and ``groupid``.

0.7 settings with no use here (``socket.*``, ``mirror.*``, ``backoff.increment.ms``)
are refused rather than ignored. ``fetch.wait.max.ms`` is rill's: the fetchers long-poll
the broker (rill's request type) instead of sleeping between empty fetches.

The security settings are every rill client's, with kafka-python's names
(``security.protocol``, ``ssl.*``, ``sasl.*``; rill.client.security.client_security). With
``security.protocol`` X the fetchers connect to each broker's X listener, as the broker
registered it in ``/rill/brokers/[id]`` (``/brokers/ids/[id]`` names only one address).
ZooKeeper itself is reached without them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rill.client.client_config import ConfigError, Setting, boolean, choice, non_negative, positive, resolve
from rill.client.security.client_security import SECURITY_SETTINGS

OFFSET_RESETS = ("smallest", "largest")


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _timeout(value: Any) -> int:
    """-1 (block forever) or a number of milliseconds >= 0."""
    number = int(value)
    if isinstance(value, bool) or number < -1:
        raise ValueError(f"expected -1 or a number of milliseconds, got {value!r}")
    return number


SETTINGS: tuple[Setting, ...] = (
    Setting("zk.connect", None, "ZooKeeper host:port[,host:port][/chroot] (keyword: zookeeper)", _text),
    Setting("groupid", None, "the consumer group (keyword: group)", _text),
    Setting("consumerid", None, "fixed consumer id suffix (0.7's consumerid); default "
            "<hostname>-<ms timestamp>-<8 hex>", _optional_text),
    Setting("zk.sessiontimeout.ms", 6000, "ZooKeeper session timeout", positive(int)),
    Setting("zk.connectiontimeout.ms", 6000, "how long the constructor waits to connect to ZooKeeper",
            positive(int)),
    Setting("autocommit.enable", True, "commit consumed offsets to ZooKeeper every autocommit.interval.ms, "
            "at each rebalance and at close()", boolean),
    Setting("autocommit.interval.ms", 10_000, "how often offsets are committed when autocommit.enable",
            positive(int)),
    Setting("autooffset.reset", "largest", "where to start a partition with no offset in ZooKeeper, or "
            "after OffsetOutOfRange: smallest or largest", choice(*OFFSET_RESETS)),
    Setting("fetch.size", 307_200, "bytes of messages fetched per partition per request", positive(int)),
    Setting("fetch.wait.max.ms", 100, "how long a broker holds a fetch that has no data yet (rill's "
            "long poll); also bounds how long stopping the fetchers takes", non_negative(int)),
    Setting("queuedchunks.max", 10, "fetched chunks buffered per stream before fetching pauses",
            positive(int)),
    Setting("rebalance.retries.max", 4, "rebalance attempts before giving up for a while (logged as an "
            "error; retried again after rebalance.backoff.ms)", positive(int)),
    Setting("rebalance.backoff.ms", 2000, "wait between rebalance attempts", non_negative(int)),
    Setting("consumer.timeout.ms", -1, "a stream iterator ends after this long without a message; "
            "-1: never", _timeout),
    Setting("socket.timeout.ms", 30_000, "deadline of a request to a broker", positive(int)),
    *SECURITY_SETTINGS,
)


def zk_consumer_settings(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Resolve the settings (defaults, then ``config``, then ``kwargs``).

    Raises:
        ConfigError: an unknown key, a bad value, or no ZooKeeper address or group.
    """
    values = resolve(SETTINGS, config, kwargs)
    for key, keyword in (("zk.connect", "zookeeper"), ("groupid", "group")):
        if values[key] is None:
            raise ConfigError(f"{key} is required (keyword argument {keyword}=...)")
    if "/" in values["groupid"]:
        raise ConfigError(f"groupid {values['groupid']!r} may not contain '/' (it is a ZooKeeper path element)")
    return values

"""Broker configuration: defaults, a TOML file, then command-line flags.

Keys use Kafka's names where the concept is Kafka's (``log.segment.bytes``,
``num.partitions`` ...). In TOML they may be written quoted (``"log.segment.bytes" =
1024``) or as dotted keys (``log.segment.bytes = 1024``, which TOML reads as nested
tables); both are flattened back to the dotted name. Unknown keys are an error, so a
typo never silently falls back to a default. docs/operations.md lists every key.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rill.broker.log.log_config import LogConfig
from rill.client.client_config import ConfigError  # one ConfigError for clients and brokers

HOUR_MS = 3600 * 1000


@dataclass(frozen=True)
class Key:
    name: str
    type: type
    default: Any
    doc: str
    choices: tuple[Any, ...] = ()  # the allowed values, when only a few are


KEYS: tuple[Key, ...] = (
    Key("broker.id", int, 0, "This broker's id (an integer, as in Kafka)."),
    Key("host.name", str, "0.0.0.0", "Address the data-plane listener binds to."),
    Key("advertised.host.name", str, "", "Host name given to clients and ZooKeeper (default: the machine's host name)."),
    Key("port", int, 9092, "Data-plane (Kafka 0.7 protocol) port; 0 picks a free port."),
    Key("listeners", str, "",
        "Data-plane listeners, PROTOCOL://host:port[,...] with PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (one each); "
        "empty: one PLAINTEXT listener on host.name and port (docs/security.md)."),
    Key("advertised.listeners", str, "",
        "Where clients reach each listener, PROTOCOL://host:port[,...] by the same names; a listener not named here "
        "is advertised at its bound address (advertised.host.name for a wildcard host)."),
    Key("ssl.certfile", str, "", "TLS listeners: this broker's certificate chain (PEM)."),
    Key("ssl.keyfile", str, "", "TLS listeners: this broker's private key (PEM)."),
    Key("ssl.cafile", str, "", "TLS listeners: the CAs (PEM) that sign client certificates (with ssl.client.auth)."),
    Key("ssl.client.auth", str, "none",
        "TLS listeners: none, requested (checked if sent) or required (a client without a valid certificate fails "
        "its handshake). A verified certificate makes the client User:<its common name>.",
        choices=("none", "requested", "required")),
    Key("sasl.enabled.mechanisms", str, "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "SASL listeners: the mechanisms offered (PLAIN checks the password against the user's SCRAM credential)."),
    Key("sasl.server.max.receive.size", int, 524_288,
        "Largest request accepted from a client that has not authenticated yet on a SASL listener."),
    Key("security.inter.broker.protocol", str, "PLAINTEXT",
        "The listener replicas fetch from their leaders on (one of listeners'): SSL presents this broker's "
        "ssl.certfile as a client certificate; SASL_* authenticate as inter.broker.sasl.username. With the "
        "authorizer, that principal needs ClusterAction on the cluster (or super.users). SSL and SASL_SSL with "
        "grpc.ssl.port also make brokers call each other's gRPC (controller, controlled shutdown, forwarded group "
        "calls) on that listener's TLS gRPC port, verified with ssl.cafile and showing ssl.certfile; then "
        "grpc.port may be -1.",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Key("inter.broker.sasl.mechanism", str, "SCRAM-SHA-256", "SASL mechanism of replica fetches (SASL_* inter-broker).",
        choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    Key("inter.broker.sasl.username", str, "", "The user brokers authenticate as to each other (SASL_* inter-broker)."),
    Key("inter.broker.sasl.password", str, "", "That user's password."),
    Key("authorizer.enable", bool, False,
        "Check every request and RPC against the ACLs (Kafka's authorizer.class.name set to its AclAuthorizer); "
        "ACLs live in <log.dir>/.security or, in a cluster, ZooKeeper (rill acls)."),
    Key("super.users", str, "",
        "Principals that may do everything, separated by semicolons (User:admin;User:broker), as Kafka's."),
    Key("allow.everyone.if.no.acl.found", bool, False,
        "With the authorizer: a resource that no ACL matches is open to everyone (one ACL, for anyone, closes it)."),
    Key("quota.window.num", int, 11, "Client quotas: the samples a rate is measured over (Kafka's default)."),
    Key("quota.window.size.seconds", float, 1.0, "Client quotas: the length of one sample (Kafka's default)."),
    Key("quota.max.delay.seconds", float, 30.0,
        "Client quotas: the longest a connection over quota is muted at once (rill quotas; docs/security.md)."),
    Key("authentication.timeout.ms", int, 10_000,
        "A connection to a TLS or SASL listener must finish its TLS handshake and SASL authentication within this "
        "long, or it is closed."),
    Key("log.dir", str, "./rill-data", "Directory holding the partitions."),
    Key("num.partitions", int, 1, "Partitions of a topic created automatically on first produce."),
    Key("num.partitions.max", int, 10_000,
        "Most partitions one topic may have (CREATE_TOPIC, Admin CreateTopic, num.partitions); checked before "
        "anything touches the disk (error InvalidPartitions)."),
    Key("max.broker.partitions", int, 100_000,
        "Most partitions this broker holds, topics being created included (KIP-578's name); a creation that "
        "would exceed it is refused with PartitionLimitReached."),
    Key("log.open.files.max", int, 4096,
        "Most segment and index files kept open at once (a least-recently-used cache): descriptors do not grow "
        "with partitions. Files of data not yet fsynced stay open until synced, so this is a soft bound."),
    Key("log.open.files.idle.ms", int, 600_000, "Close a cached segment or index file unused for this long."),
    Key("auto.create.topics.enable", bool, True,
        "Create a topic on first produce (Kafka 0.7 behaviour); in a cluster with default.replication.factor "
        "above 1, a replicated topic of that factor."),
    Key("delete.topic.enable", bool, True,
        "Admin DeleteTopic deletes topics (rill topics delete); false refuses it with TOPIC_DELETION_DISABLED."),
    Key("log.segment.bytes", int, 1024 ** 3, "Size at which the active segment rolls."),
    Key("log.roll.hours", float, 168.0, "Age at which the active segment rolls."),
    Key("log.flush.interval.messages", int, 10_000, "fsync a partition after this many messages."),
    Key("log.flush.interval.ms", int, 1000, "fsync a partition at least this often (ms) when it has unflushed data."),
    Key("log.retention.hours", float, 168.0, "Delete segments older than this; -1 keeps them forever."),
    Key("log.retention.bytes", int, -1, "Delete the oldest segments while a partition is larger; -1: no limit."),
    Key("log.retention.check.interval.ms", int, 300_000, "How often retention runs."),
    Key("log.flush.offset.checkpoint.interval.ms", int, 60_000,
        "How often the recovery-point checkpoint (what recovery after a crash may skip) is written, when something "
        "was flushed since."),
    Key("log.index.interval.bytes", int, 4096, "Bytes between entries of the sparse offset/time index."),
    Key("log.index.interval.ms", int, 1000, "An append this long after the last index entry gets its own entry: "
        "append times (Spark's timestamp column, startingTimestamp, lag seconds) are precise to this."),
    Key("log.scrub.enable", bool, True,
        "Re-read every segment in the background and check every message's CRC; a corrupt range found is "
        "logged and never served."),
    Key("log.scrub.bytes.per.second", int, 8 * 1024 * 1024, "How fast the scrubber reads (its share of the disk)."),
    Key("log.scrub.interval.hours", float, 168.0,
        "A scrub pass starts at start-up and then this often (or when the previous one ends, if later)."),
    Key("log.recovery.truncate.corrupt", bool, False,
        "Open a partition with corruption in the middle by cutting it there (the cut bytes are kept aside); "
        "without it such bytes are kept and never served."),
    Key("message.max.bytes", int, 1_000_000, "Largest message payload accepted."),
    Key("socket.request.max.bytes", int, 100 * 1024 * 1024, "Largest request; checked from the size field before reading."),
    Key("max.connections", int, 10_000,
        "Most open connections. A new one beyond it takes the place of the least recently active idle connection "
        "of the address holding the most; it is refused only when none is idle."),
    Key("max.connections.per.ip", int, 2_147_483_647,
        "Most open connections from one address; a new one beyond it takes the place of that address's least "
        "recently active idle connection, or is refused."),
    Key("queued.max.request.bytes", int, 200 * 1024 * 1024,
        "Most bytes of requests over 64 KiB being received at once, broker-wide (at least socket.request.max.bytes). "
        "Beyond it those connections stop being read until memory is given back; smaller requests are not held up."),
    Key("request.read.timeout.ms", int, 30_000,
        "A request over 64 KiB must arrive whole within this time of its size field, or its connection is closed "
        "(it holds request memory meanwhile)."),
    Key("connections.max.idle.ms", int, 600_000, "Close connections idle for this long."),
    Key("fetch.max.wait.ms", int, 30_000, "Upper bound on a long-poll fetch's max_wait_ms."),
    Key("grpc.port", int, 9093,
        "gRPC port of the group coordinator and admin services (plaintext); 0 picks a free port, -1 serves no "
        "plaintext gRPC (then grpc.ssl.port must be set and, in a cluster, security.inter.broker.protocol be SSL "
        "or SASL_SSL: brokers call each other's gRPC on it otherwise)."),
    Key("grpc.ssl.port", int, -1,
        "gRPC over TLS (with ssl.certfile, ssl.keyfile; client certificates name the caller when ssl.client.auth = "
        "required): its port, 0 picks a free one, -1 none. Clients of the SSL and SASL_SSL listeners are given it."),
    Key("metrics.port", int, 9404,
        "HTTP port serving Prometheus metrics at /metrics (docs/operations.md lists them); 0 serves none and "
        "counts nothing, -1 picks a free port (tests, several brokers on one host; logged in broker.ready)."),
    Key("metrics.host", str, "",
        "Address the metrics endpoint binds to (default: host.name). It has no authentication, like a JMX "
        "exporter's: bind it to an address only your Prometheus reaches."),
    Key("grpc.max.workers", int, 1024,
        "Threads serving gRPC calls (created as needed). With grpc.server = sync a RegisterConsumer holds one "
        "until its rebalance completes, so it must exceed group.max.size (checked at start-up) and, with many "
        "large groups rebalancing at once, their members together; with aio only running handlers and fsyncs "
        "hold one."),
    Key("grpc.server", str, "sync",
        "gRPC server implementation: \"sync\" (a thread per call) or \"aio\" (grpc.aio on its own event loop; "
        "handlers and fsyncs on worker threads, a waiting RegisterConsumer holds no thread).",
        choices=("sync", "aio")),
    Key("group.min.session.timeout.ms", int, 6000, "Smallest session timeout a group or consumer may ask for."),
    Key("group.max.session.timeout.ms", int, 300_000, "Largest session timeout a group or consumer may ask for."),
    Key("group.max.size", int, 1000, "Most members one group may have."),
    Key("offsets.segment.bytes", int, 1024 * 1024,
        "Segment size of a single broker's coordinator log (smaller segments: faster start-up replay)."),
    Key("offsets.commit.timeout.ms", int, 5000,
        "How long a commit may wait to be durable: fsynced (a single broker) or in every in-sync replica of its "
        "__rill_groups partition (a cluster)."),
    Key("offsets.topic.num.partitions", int, 50,
        "In a cluster: partitions of the internal topic __rill_groups, which holds the groups' state (a group's "
        "coordinator leads the partition its name hashes to, as Kafka's __consumer_offsets). Fixed once the topic "
        "exists."),
    Key("offsets.topic.replication.factor", int, 3,
        "In a cluster: replicas of each __rill_groups partition. The topic is created once this many brokers are "
        "live (until then no group has a coordinator); set 1 for a one-broker cluster."),
    Key("offsets.checkpoint.interval.ms", int, 1000,
        "No longer used: group state is in the replicated topic __rill_groups (before, coordinators checkpointed "
        "groups to ZooKeeper this often). Accepted so that old configurations still start."),
    Key("zookeeper.connect", str, "", "ZooKeeper connect string host:port[,host:port][/chroot]; empty runs standalone."),
    Key("zookeeper.session.timeout.ms", int, 6000,
        "ZooKeeper session timeout (Kafka 0.7's zk.sessiontimeout.ms): a dead broker's registration vanishes after it."),
    Key("zookeeper.connection.timeout.ms", int, 6000, "How long start-up waits to connect to ZooKeeper."),
    Key("replica.lag.time.max.ms", int, 30_000,
        "Replicated topics: a follower not caught up with its leader for this long leaves the in-sync replicas "
        "(Kafka's default since 2.5)."),
    Key("min.insync.replicas", int, 1,
        "Replicated topics: an acks=all produce is refused with NotEnoughReplicas (nothing written) while fewer "
        "replicas than this are in sync."),
    Key("replica.fetch.wait.max.ms", int, 500, "Longest a follower's fetch waits at its leader for new data."),
    Key("replica.fetch.min.bytes", int, 1, "Bytes a follower's fetch waits for at its leader."),
    Key("replica.fetch.max.bytes", int, 1024 * 1024,
        "Bytes a follower asks for per partition and fetch (at least one whole message is always sent)."),
    Key("replica.fetch.backoff.ms", int, 1000, "How long a follower waits before fetching a partition again after an error."),
    Key("default.replication.factor", int, 1,
        "Replicas of a topic created without a replication factor (1: a Kafka 0.7-style topic on one broker); "
        "with zookeeper.connect also of topics made by CREATE_TOPIC and auto-creation."),
    Key("unclean.leader.election.enable", bool, False,
        "Replicated topics: let the controller elect a replica that is not in sync when no in-sync replica is "
        "alive (availability over committed data); per topic in the topic's config."),
    Key("controller.socket.timeout.ms", int, 5000, "How long the controller waits for a broker to answer a LeaderAndIsr."),
    Key("controlled.shutdown.enable", bool, True,
        "On SIGTERM, a broker holding replicas asks the controller to move its leaderships away before it stops."),
    Key("controlled.shutdown.max.retries", int, 3, "Attempts of a controlled shutdown before stopping anyway."),
    Key("controlled.shutdown.retry.backoff.ms", int, 5000, "Pause between two attempts of a controlled shutdown."),
    Key("auto.leader.rebalance.enable", bool, True,
        "Replicated topics: the controller checks leadership every leader.imbalance.check.interval.seconds and "
        "gives brokers leading too few of the partitions they are preferred for (first in the assignment) their "
        "leadership back, as a preferred leader election (rill topics elect-leaders) would."),
    Key("leader.imbalance.check.interval.seconds", float, 300.0,
        "How often the controller checks the leader imbalance (fractions allowed)."),
    Key("leader.imbalance.per.broker.percentage", int, 10,
        "A broker is rebalanced when more than this percentage of the partitions it is preferred for are led by "
        "other brokers."),
    Key("replica.socket.timeout.ms", int, 30_000,
        "A follower's connection to its leader times out after this long without an answer (must exceed "
        "replica.fetch.wait.max.ms)."),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _coerce(key: Key, value: Any) -> Any:
    if key.type is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{key.name}: expected true or false, got {value!r}")
    if key.type in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{key.name}: expected a number, got {value!r}")
    try:
        coerced = key.type(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key.name}: expected {key.type.__name__}, got {value!r}") from exc
    if key.choices and coerced not in key.choices:
        raise ConfigError(f"{key.name}: expected one of {', '.join(map(str, key.choices))}, got {value!r}")
    return coerced


@dataclass(frozen=True)
class BrokerConfig:
    """Every broker setting, by its dotted name in ``values``."""

    values: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
        """Defaults, then the TOML file at ``path``, then ``overrides`` (dotted or underscore names)."""
        values = {k.name: k.default for k in KEYS}
        layers: list[dict[str, Any]] = []
        if path is not None:
            try:
                with open(path, "rb") as f:
                    layers.append(_flatten(tomllib.load(f)))
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"config file {path}: {exc}") from exc
        layers.append({name.replace("_", "."): v for name, v in (overrides or {}).items()})
        for layer in layers:
            for name, value in layer.items():
                key = KEYS_BY_NAME.get(name)
                if key is None:
                    raise ConfigError(f"unknown configuration key {name!r} (see docs/operations.md)")
                values[name] = _coerce(key, value)
        config = cls(values)
        config.log_config()  # validates the storage settings
        config._check_grpc()
        config._check_limits()
        return config

    def _check_limits(self) -> None:
        v = self.values
        if not 1 <= v["num.partitions.max"] <= v["max.broker.partitions"]:
            raise ConfigError(f"num.partitions.max ({v['num.partitions.max']}) must be between 1 and "
                              f"max.broker.partitions ({v['max.broker.partitions']})")
        if not 1 <= v["num.partitions"] <= v["num.partitions.max"]:
            raise ConfigError(f"num.partitions ({v['num.partitions']}) must be between 1 and "
                              f"num.partitions.max ({v['num.partitions.max']})")
        if v["queued.max.request.bytes"] < v["socket.request.max.bytes"]:
            raise ConfigError(f"queued.max.request.bytes ({v['queued.max.request.bytes']}) must be at least "
                              f"socket.request.max.bytes ({v['socket.request.max.bytes']})")
        for key in ("max.connections", "max.connections.per.ip", "request.read.timeout.ms",
                    "connections.max.idle.ms", "offsets.topic.replication.factor"):
            if v[key] < 1:
                raise ConfigError(f"{key} must be positive, got {v[key]}")
        if v["log.scrub.bytes.per.second"] < 1 or v["log.scrub.interval.hours"] < 0:
            raise ConfigError("log.scrub.bytes.per.second must be positive and log.scrub.interval.hours not negative")
        if not 1 <= v["offsets.topic.num.partitions"] <= 1000:
            raise ConfigError(f"offsets.topic.num.partitions must be between 1 and 1000, got "
                              f"{v['offsets.topic.num.partitions']}")
        if v["log.open.files.max"] < 16:
            raise ConfigError(f"log.open.files.max must be at least 16, got {v['log.open.files.max']}")
        interval, percentage = v["leader.imbalance.check.interval.seconds"], v["leader.imbalance.per.broker.percentage"]
        if interval <= 0 or not 0 <= percentage <= 100:
            raise ConfigError("leader.imbalance.check.interval.seconds must be positive and "
                              "leader.imbalance.per.broker.percentage between 0 and 100")
        if not -1 <= v["metrics.port"] <= 65535:
            raise ConfigError(f"metrics.port must be a port, 0 (none) or -1 (a free one), got {v['metrics.port']}")
        if v["log.open.files.idle.ms"] < 0:
            raise ConfigError(f"log.open.files.idle.ms must not be negative, got {v['log.open.files.idle.ms']}")

    def _check_grpc(self) -> None:
        v = self.values
        if v["grpc.server"] == "sync" and v["group.max.size"] >= v["grpc.max.workers"]:
            raise ConfigError(
                f"group.max.size ({v['group.max.size']}) must be below grpc.max.workers ({v['grpc.max.workers']}) "
                "with grpc.server = sync: every member waiting in a rebalance holds a worker thread. "
                "Raise grpc.max.workers or use grpc.server = aio.")

    def log_config(self) -> LogConfig:
        v = self.values
        retention_hours = v["log.retention.hours"]
        try:
            return LogConfig(
                segment_bytes=v["log.segment.bytes"],
                roll_ms=int(v["log.roll.hours"] * HOUR_MS),
                flush_interval_messages=v["log.flush.interval.messages"],
                flush_interval_ms=v["log.flush.interval.ms"],
                retention_ms=-1 if retention_hours < 0 else int(retention_hours * HOUR_MS),
                retention_bytes=v["log.retention.bytes"],
                max_message_bytes=v["message.max.bytes"],
                index_interval_bytes=v["log.index.interval.bytes"],
                index_interval_ms=v["log.index.interval.ms"],
                retention_check_interval_ms=v["log.retention.check.interval.ms"],
                recovery_point_interval_ms=v["log.flush.offset.checkpoint.interval.ms"],
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from exc


def describe_keys() -> list[tuple[str, str, str]]:
    """(name, default, doc) for every key, for docs and ``rill-broker --help-config``."""
    return [(k.name, repr(k.default) if isinstance(k.default, str) else str(k.default).lower()
             if isinstance(k.default, bool) else str(k.default), k.doc) for k in KEYS]


__all__ = ["BrokerConfig", "ConfigError", "KEYS", "describe_keys"]

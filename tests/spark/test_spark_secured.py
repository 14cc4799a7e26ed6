"""The ``rill`` source, the loader and the audit job over SASL_SSL, against a broker with the authorizer on.

One broker with a PLAINTEXT and a SASL_SSL listener (and gRPC with TLS, which METADATA
gives SASL_SSL clients: the loader commits its offsets there); the SCRAM user ``alice`` may read,
describe and write the topics ``secure`` and ``audit`` and commit for the loader's group;
anonymous clients may do nothing. The security settings reach the source as options,
``kafka.``-prefixed (Spark's Kafka-source convention) or bare, and travel to the
executors' tasks; a wrong password fails the query at planning with the broker's refusal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.cli.main import main
from rill.client.producer import Producer
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acls import (AccessControlEntry, AclBinding, Operation, Permission, ResourcePattern,
                                       ResourceType)
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.spark.audit import audit
from rill.client.spark.load import load
from rill.client.spark.options import SourceOptionError, parse_read_options
from tests.security.tls_fixtures import make_certs
from tests.spark.helpers import rows_of

TOPIC = "secure"
GROUP = "secure-loader"


@dataclass(frozen=True)
class Secured:
    broker: RunningBroker
    ca: str

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.broker.listener_port('SASL_SSL')}"

    def settings(self, password: str = "alice-secret") -> dict[str, str]:
        """alice's client settings (kafka-python's names) with ``password``."""
        return {"security.protocol": "SASL_SSL", "ssl.cafile": self.ca, "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.plain.username": "alice", "sasl.plain.password": password}

    def options(self, password: str = "alice-secret") -> dict[str, str]:
        """The same as the source's options, as Spark's Kafka source names client settings."""
        return {f"kafka.{k}": v for k, v in self.settings(password).items()}

    def rows(self, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
        """Every message of ``topic`` as (partition, offset, value), read as alice."""
        rows = []
        with SimpleConsumer("localhost", self.broker.listener_port("SASL_SSL"), timeout=10,
                            security=from_settings(self.settings())) as c:
            for p in range(partitions):
                offset, end = c.earliest_offset(topic, p), c.latest_offset(topic, p)
                while offset < end:
                    messages = c.fetch(topic, p, offset)
                    rows.extend((p, m.offset, m.value) for m in messages)
                    offset = messages[-1].next_offset
        return rows


def _alice_may(data: Path) -> None:
    bindings = [AclBinding(ResourcePattern(ResourceType.TOPIC, topic), AccessControlEntry("User:alice", "*", op,
                                                                                          Permission.ALLOW))
                for topic in (TOPIC, "audit") for op in (Operation.READ, Operation.WRITE)]
    bindings.append(AclBinding(ResourcePattern(ResourceType.GROUP, GROUP),
                               AccessControlEntry("User:alice", "*", Operation.READ, Permission.ALLOW)))
    store = FileAclStore(data, poll_interval=None)
    try:
        store.add(bindings)
    finally:
        store.close()


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    """The broker, with alice, her ACLs and ``secure`` (2 partitions, 150 messages each) in place."""
    certs = make_certs(tmp_path / "certs")
    data = tmp_path / "data"
    data.mkdir()
    with FileEntityConfigs(data) as configs:
        CredentialStore(configs).set_password("alice", "alice-secret")
    _alice_may(data)
    with running_broker(data, listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://localhost:0", authorizer_enable=True,
                        grpc_ssl_port=0, num_partitions=2, **certs.broker_settings()) as b:
        s = Secured(b, certs.ca)
        b.broker.logs.create_topic(TOPIC, 2)  # alice may not Create
        b.broker.logs.create_topic("audit", 1)
        with SimpleProducer("localhost", b.listener_port("SASL_SSL"), timeout=10,
                            security=from_settings(s.settings())) as producer:
            for p in range(2):
                producer.send(TOPIC, [f"{p}-{i:04d}".encode() * 3 for i in range(150)], p)
        yield s


def _read(spark: Any, s: Secured, options: dict[str, str], **more: str) -> Any:
    return (spark.read.format("rill").option("bootstrap", s.bootstrap).option("subscribe", TOPIC)
            .options(**options, **more).load())


@pytest.mark.slow
def test_batch_read_with_the_security_options(spark: Any, secured: Secured) -> None:
    """kafka.security.protocol & co. reach planning and every task (three ranges): the rows are the topic's."""
    with SimpleConsumer("127.0.0.1", secured.broker.port, timeout=5) as anonymous:
        assert not anonymous.topics()  # the authorizer is on: PLAINTEXT clients see nothing
    df = _read(spark, secured, secured.options(), splitBytes="2000")
    assert df.rdd.getNumPartitions() > 2  # split ranges: tasks in Python workers, not the planner
    assert rows_of(df) == sorted(secured.rows(TOPIC, 2))


@pytest.mark.slow
def test_write_with_bare_client_keys(spark: Any, secured: Secured) -> None:
    """A write given the client keys without the prefix sends through producers that authenticate as alice."""
    values = [f"w{i}" for i in range(40)]
    (spark.createDataFrame([(v,) for v in values], "value STRING").write.format("rill")
     .option("bootstrap", secured.bootstrap).option("topic", TOPIC).options(**secured.settings())
     .mode("append").save())
    written = [v for _, _, v in secured.rows(TOPIC, 2) if v.startswith(b"w")]
    assert sorted(written) == sorted(v.encode() for v in values)


@pytest.mark.slow
def test_wrong_password_fails_the_query_with_the_refusal(spark: Any, secured: Secured) -> None:
    """A wrong password fails the read at planning, within seconds, with the broker's SASL refusal in the error."""
    started = time.monotonic()
    with pytest.raises(Exception, match="refused the security options") as failure:
        _read(spark, secured, secured.options("guess")).count()
    assert "SASL SCRAM-SHA-256 authentication with broker" in str(failure.value)
    assert time.monotonic() - started < 20


@pytest.mark.slow
def test_loader_and_audit_job_take_the_security_settings(spark: Any, secured: Secured, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """load() and ``rill spark audit --command-config`` read over SASL_SSL; the loader's group commit too."""
    result = load(spark, secured.bootstrap, [TOPIC], tmp_path / "out", group=GROUP, security=secured.settings())
    assert result.rows == 300 and result.coordinator_error is None
    assert rows_of(spark.read.parquet(str(tmp_path / "out"))) == sorted(secured.rows(TOPIC, 2))

    with Producer({"bootstrap.servers": secured.bootstrap, **secured.settings(), "audit.topic": "audit",
                   "audit.window.ms": 60000, "client.id": "auditor", "linger.ms": 2}) as producer:
        for r in [producer.send(TOPIC, b"audited-%d" % i) for i in range(30)]:
            r.get_offset(10)
    assert audit(spark, secured.bootstrap, [TOPIC], "audit", 60000, security=secured.settings()).missing == 0
    config = tmp_path / "alice.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in secured.settings().items()))
    capsys.readouterr()
    code = main(["spark", "audit", "-b", secured.bootstrap, "-t", TOPIC, "--audit-topic", "audit", "--window", "1h",
                 "--command-config", str(config)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and sum(int(line.split()[-2]) for line in out[1:]) == 30  # found: every audited message


def test_security_options_are_checked_when_the_query_is_planned(tmp_path: Path) -> None:
    """Bad security options fail with a SourceOptionError naming what to change, before any connection."""
    base = {"bootstrap": "localhost:9094", "subscribe": TOPIC}
    parsed = parse_read_options({**base, "kafka.security.protocol": "sasl_plaintext",
                                 "sasl.plain.username": "alice", "kafka.sasl.plain.password": "p"}, streaming=False)
    assert parsed.security == {"security.protocol": "sasl_plaintext", "sasl.plain.username": "alice",
                               "sasl.plain.password": "p"}
    assert parse_read_options(base, streaming=False).security == {}
    for options, message in [
        ({"security.protocol": "SSL", "kafka.security.protocol": "SASL_SSL"}, "differ: give one of them"),
        ({"kafka.security.protocol": "TLS"}, "security.protocol"),
        ({"kafka.security.protocol": "SASL_SSL"}, "needs sasl.plain.username"),
        ({"kafka.security.protocol": "SSL", "kafka.ssl.cafile": str(tmp_path / "missing.pem")}, "cannot read"),
        ({"kafka.ssl.truststore.location": "x"}, "unknown option"),
    ]:
        with pytest.raises(SourceOptionError, match=message):
            parse_read_options({**base, **options}, streaming=False)

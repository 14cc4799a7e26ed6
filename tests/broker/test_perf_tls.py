"""``rill perf produce|consume|latency|consumer-api|e2e --command-config`` against a TLS listener,
and ``rill perf security`` end to end with small figures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker, running_broker
from rill.client.cli.main import main
from rill.client.simple import SimpleConsumer
from tests.security.tls_fixtures import Certs, make_certs


@pytest.fixture(autouse=True)
def quiet_broker() -> Iterator[None]:
    with capture_logs():
        yield


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


@pytest.fixture
def broker(tmp_path: Path, certs: Certs) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", grpc_ssl_port=0,
                        **certs.broker_settings()) as b:
        yield b


@pytest.fixture
def tls_properties(tmp_path: Path, certs: Certs) -> str:
    path = tmp_path / "tls.properties"
    path.write_text(f"security.protocol=SSL\nssl.cafile={certs.ca}\n")
    return str(path)


def perf(capsys: pytest.CaptureFixture[str], broker: RunningBroker, config: str, *argv: str) -> dict:
    """Run ``rill perf ARGV --json`` on the broker's SSL listener with ``--command-config config``."""
    code = main(["perf", *argv, "--bootstrap-server", f"127.0.0.1:{broker.listener_port('SSL')}", "--timeout", "10",
                 "--command-config", config, "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result: dict = json.loads(out.strip().splitlines()[-1])
    assert result["command"].startswith("rill perf ") and "--command-config" in result["command"]
    return result


def test_perf_produce_consume_and_latency_over_tls(broker: RunningBroker, tls_properties: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The simple-client benchmarks speak TLS on the SSL listener; what they wrote is there over plaintext."""
    produced = perf(capsys, broker, tls_properties, "produce", "-t", "bench", "--partitions", "2", "--batch", "10",
                    "--messages", "1000")
    assert produced["messages"] == 1000
    consumed = perf(capsys, broker, tls_properties, "consume", "-t", "bench", "--fetch-size", "3000")
    assert consumed["messages"] == 1000 and consumed["payload_bytes"] == 1000 * 200
    latency = perf(capsys, broker, tls_properties, "latency", "-t", "lat", "--messages", "50", "--warmup", "5")
    assert latency["messages"] == 50 and latency["p50_us"] <= latency["p99_us"]
    with SimpleConsumer("127.0.0.1", broker.port, timeout=5) as plain:
        assert sum(plain.latest_offset("bench", p) > 0 for p in range(2)) == 2


def test_perf_without_command_config_fails_on_the_tls_listener(broker: RunningBroker,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Plaintext on the SSL port is an error (exit 1), so a TLS figure cannot silently be a plaintext one."""
    code = main(["perf", "produce", "-t", "bench", "--messages", "10", "--timeout", "3",
                 "--bootstrap-server", f"127.0.0.1:{broker.listener_port('SSL')}"])
    assert code != 0


def test_perf_consumer_api_and_e2e_over_tls(broker: RunningBroker, tls_properties: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The poll() consumer (and its group calls over gRPC with TLS) and e2e's producer process connect with the
    file's settings."""
    api = perf(capsys, broker, tls_properties, "consumer-api", "-t", "capi", "--messages", "2000", "--runs", "1")
    assert api["runs"][0]["messages"] == 2000
    for kind in ("simple", "producer"):
        e2e = perf(capsys, broker, tls_properties, "e2e", "-t", f"e2e-{kind}", "--rate", "200", "--seconds", "1",
                   "--warmup", "10", "--runs", "1", "--producer", kind)
        assert e2e["runs"][0]["messages"] == 190 and e2e["p50_ms"] <= e2e["p99_ms"]


@pytest.mark.slow
def test_perf_security_compares_tls_and_acls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One small round of each comparison: every figure on both sides, with 20 ACLs on the authorizer's broker."""
    code = main(["perf", "security", "--dir", str(tmp_path), "--rounds", "1", "--acls", "20", "--messages", "20000",
                 "--rate", "500", "--seconds", "1", "--large-mb", "5", "--idle-wait", "0", "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    tls, acls = result["comparisons"]
    assert (tls["a"], tls["b"]) == ("PLAINTEXT", "SSL") and (acls["a"], acls["b"]) == ("authorizer off", "20 ACLs")
    assert [(r["benchmark"], r["metric"]) for r in tls["rows"]] == [
        ("produce", "messages_per_s"), ("consume", "messages_per_s"), ("e2e", "p50_ms"), ("e2e", "p99_ms"),
        ("consume-10KB-4MiB", "mb_per_s")]
    assert len(acls["rows"]) == 4
    assert all(r["ratio"] > 0 and r["other_cores"] >= 0 for r in tls["rows"] + acls["rows"])
    assert set(tls["rows"][0]["broker_cpu_us_per_mb"]) == {"PLAINTEXT", "SSL"}
    assert result["tls"].startswith("TLSv1.")
    assert list(tmp_path.iterdir()) == []  # the work directory is removed

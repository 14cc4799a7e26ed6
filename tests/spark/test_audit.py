"""The audit job (seed 001) with real Spark: an intact topic has nothing missing; a deleted segment is reported."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import running_broker
from rill.client.cli.main import main
from rill.client.producer import Producer
from rill.client.spark.audit import audit
from rill.client.simple import SimpleConsumer

pytestmark = pytest.mark.slow

WINDOW_MS = 300
BROKER = {"num_partitions": 2, "log.segment.bytes": 4096}


def produce_audited(address: str, topic: str, groups: int = 3, per_group: int = 60) -> list[tuple[int, int]]:
    """Send ``groups`` bursts of messages a window apart with auditing on; (partition, offset) of each."""
    sent = []
    with Producer({"bootstrap.servers": address, "audit.topic": "audit", "audit.window.ms": WINDOW_MS,
                   "client.id": "auditor", "linger.ms": 2}) as producer:
        for g in range(groups):
            responses = [producer.send(topic, b"m%05d" % i + b"." * 90) for i in range(per_group * g, per_group * (g + 1))]
            for r in responses:
                offset = r.get_offset(10)  # first: the partition may be known only then
                assert r.partition is not None
                sent.append((r.partition, offset))
            time.sleep(WINDOW_MS / 1000)
    return sent


def events(address: str) -> list[dict[str, Any]]:
    host, port = address.split(":")
    out: list[dict[str, Any]] = []
    with SimpleConsumer(host, int(port)) as c:
        offset, end = c.earliest_offset("audit", 0), c.latest_offset("audit", 0)
        while offset < end:
            messages = c.fetch("audit", 0, offset)
            out.extend(json.loads(m.value) for m in messages)
            offset = messages[-1].next_offset
    return out


def setup_topics(address: str) -> None:
    host, port = address.split(":")
    with SimpleConsumer(host, int(port)) as c:
        c.create_topic("orders", 2)
        c.create_topic("audit", 1)


def test_intact_topic_has_nothing_missing(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every acknowledged message is found in its window; the CLI prints the windows and exits 0."""
    with running_broker(tmp_path / "data", **BROKER) as b:
        setup_topics(b.address)
        sent = produce_audited(b.address, "orders")
        report = audit(spark, b.address, ["orders"], "audit", WINDOW_MS)
        assert report.missing == 0 and report.bad_events == 0
        assert sum(w.expected for w in report.windows) == sum(w.found for w in report.windows) == len(sent)
        assert len(report.windows) >= 3  # three bursts a window apart
        assert all(w.producers == 1 and w.window_start_ms % WINDOW_MS == 0 for w in report.windows)
        code = main(["spark", "audit", "-b", b.address, "-t", "orders", "--audit-topic", "audit", "--window", "1h"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0].split() == ["topic", "window", "start", "(UTC)", "producers", "expected", "found", "missing"]
    rows = [line.split()[-3:] for line in out[1:]]  # one hour window (two if the test straddles an hour)
    assert len(rows) in (1, 2), out
    assert [missing for _, _, missing in rows] == ["0"] * len(rows)
    assert sum(int(expected) for expected, _, _ in rows) == sum(int(found) for _, found, _ in rows) == len(sent)


def test_deleted_segment_is_reported_missing(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Deleting the first segment of a partition (broker stopped) shows its messages missing in their windows."""
    data = tmp_path / "data"
    with running_broker(data, **BROKER) as b:
        setup_topics(b.address)
        sent = produce_audited(b.address, "orders")
        claimed = events(b.address)
    segments = sorted((data / "orders-0").glob("*.log"))
    assert len(segments) >= 3
    os.remove(segments[0])
    cut = int(segments[1].stem)  # the new log start of partition 0
    lost = [o for p, o in sent if p == 0 and o < cut]
    assert lost
    lost_windows = {(e["window_start_ms"]) for e in claimed for part, first, _, _ in e["ranges"]
                    if e["topic"] == "orders" and part == 0 and first < cut}
    with running_broker(data, **BROKER) as b:
        with SimpleConsumer(b.host, b.port) as c:
            assert c.earliest_offset("orders", 0) == cut
        report = audit(spark, b.address, ["orders"], "audit", WINDOW_MS)
        assert report.missing == len(lost)
        assert {w.window_start_ms for w in report.windows if w.missing} == lost_windows
        assert sum(w.found for w in report.windows) == len(sent) - len(lost)
        code = main(["spark", "audit", "-b", b.address, "-t", "orders", "--audit-topic", "audit",
                     "--window", f"{WINDOW_MS}ms"])
    out = capsys.readouterr().out.splitlines()
    assert code == 3
    flagged = [line for line in out[1:] if line.endswith("MISSING")]
    assert len(flagged) == len(lost_windows)
    assert sum(int(line.split()[-2]) for line in flagged) == len(lost)


def test_audit_reads_partitions_from_their_first_audited_offset(spark: Any, tmp_path: Path) -> None:
    """Messages before the first audited offset are not read; the audit still finds every audited message."""
    from rill.client.simple import SimpleProducer
    from rill.client.spark.audit import reading_starts

    with running_broker(tmp_path / "data", **BROKER) as b:
        setup_topics(b.address)
        with SimpleProducer(b.host, b.port) as p:
            p.send("orders", [b"unaudited" * 10] * 60, partition=0)  # about 6 KB: more than a segment
        sent = produce_audited(b.address, "orders", groups=1)
        firsts: dict[tuple[str, int], int] = {}
        for e in events(b.address):
            for part, first, _, _ in e["ranges"]:
                firsts[("orders", part)] = min(first, firsts.get(("orders", part), first))
        starts = reading_starts(b.address, ["orders"], {**firsts, ("orders", 7): 0})
        assert 0 < starts["orders"]["0"] <= firsts[("orders", 0)]
        assert reading_starts(b.address, ["orders"], {("orders", 0): 0})["orders"]["0"] == -2  # the log start
        assert set(starts) == {"orders"} and set(starts["orders"]) == {"0", "1"}
        with SimpleConsumer(b.host, b.port) as c:
            end = c.latest_offset("orders", 1)
        assert reading_starts(b.address, ["orders"], {("orders", 1): end + 10})["orders"] == {"0": -1, "1": end}
        report = audit(spark, b.address, ["orders"], "audit", WINDOW_MS)
        assert report.missing == 0 and sum(w.found for w in report.windows) == len(sent)

"""Bytes flipped in closed segments of a real ``rill-broker``: never served, found, reported and repaired."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rill.client.consumer import Consumer
from rill.client.errors import InvalidMessage
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import decode_message_set, scan
from rill.client.simple import SimpleConsumer, SimpleProducer

from tests.conftest import RawClient
from tests.process.broker_process import BrokerProcess

SETTINGS = ("--set", "log.segment.bytes=65536", "--set", "log.scrub.bytes.per.second=50000000")
COUNT = 3000


def _produce(port: int) -> tuple[list[int], list[bytes]]:
    values = [b"%05d-" % i + bytes([65 + i % 26]) * 94 for i in range(COUNT)]
    offsets = []
    with SimpleProducer("127.0.0.1", port) as producer:
        for start in range(0, COUNT, 100):
            ack = producer.send("t", values[start:start + 100], 0)
            assert ack.error == 0
            offsets += [ack.first_offset + 110 * i for i in range(100)]
    return offsets, values


def _flip(data: Path, offset: int) -> str:
    """Flip one byte of the payload of the message at ``offset``; return its segment file."""
    segments = sorted((data / "t-0").glob("*.log"))
    path = [p for p in segments if int(p.stem) <= offset][-1]
    with open(path, "r+b") as f:
        f.seek(offset - int(path.stem) + 30)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x5A]))
    return str(path)


def _read_everything(port: int, bad: int | None = None) -> list[tuple[int, bytes]]:
    """Fetch from 0 with raw fetches; every served byte must pass its CRC; the bad offset raises code 2."""
    out: list[tuple[int, bytes]] = []
    with SimpleConsumer("127.0.0.1", port, timeout=30) as client:
        end = client.latest_offset("t", 0)
        if bad is not None:
            with pytest.raises(InvalidMessage, match=f"offset {bad}"):
                client.fetch("t", 0, bad, 50_000)
    raw = RawClient("127.0.0.1", port)
    offset = 0
    while offset < end:
        error, data = rq.decode_fetch_response(raw.request(rq.encode_fetch("t", 0, offset, 50_000)))
        if offset == bad:
            assert (error, len(data)) == (2, 0)  # refused: the 0.7 InvalidMessage code, no bytes
            offset += 110  # the reader decides to skip the rotten message
            continue
        assert error == 0
        assert scan(data).error == 0  # no byte that fails its CRC is ever served
        messages, used = decode_message_set(data, base_offset=offset)
        assert used > 0
        out += [(m.offset, m.value) for m in messages]
        offset += used
    raw.close()
    return out


@pytest.mark.parametrize("shutdown", ["clean", "kill-9"])
def test_flipped_bytes_in_a_closed_segment_are_never_served(tmp_path: Path, shutdown: str) -> None:
    """After a clean or unclean stop, a rotten message is refused by name, found by the scrubber, reported and quarantined."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, *SETTINGS).start()
    offsets, values = _produce(broker.port)
    if shutdown == "clean":
        assert broker.terminate() == 0
    else:
        time.sleep(1.5)  # flushed by time, so the rot lands before the recovery point
        broker.kill9()
    bad = offsets[1000]
    path = _flip(data, bad)
    broker = BrokerProcess(data, *SETTINGS).start()
    try:
        got = _read_everything(broker.port, bad)
        expected = [(o, v) for o, v in zip(offsets, values) if o != bad]
        assert got == expected
        with Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "auto.offset.reset": "earliest"}) as consumer:
            consumer.add_topic("t", 0)
            seen, error = 0, None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and error is None:
                try:
                    seen += len(consumer.poll(0.5))
                except InvalidMessage as exc:
                    error = exc
            assert seen == 1000 and error is not None
            assert "t-0" in str(error) and f"offset {bad}" in str(error) and "corrupt" in str(error)
        found_by = ("log.corrupt_data", "recovery.corrupt_range")  # the scrubber or a read; recovery after kill -9
        deadline = time.monotonic() + 20
        while not [e for e in broker.events() if e.get("event") in found_by]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        reported = [e for e in broker.events() if e.get("event") in found_by]
        assert {(e["file"], e["position"]) for e in reported} == {(path, bad - int(Path(path).stem))}
    finally:
        assert broker.terminate() == 0
    verify = _verify(data, "--json")
    assert verify.returncode == 3
    [finding, summary] = [json.loads(line) for line in verify.stdout.splitlines()]
    assert (finding["file"], finding["position"], finding["bytes"]) == (path, bad - int(Path(path).stem), 110)
    assert summary["corrupt_ranges"] == 1
    assert _verify(data, "--repair", "quarantine").returncode == 0
    assert _verify(data).returncode == 0
    broker = BrokerProcess(data, *SETTINGS).start()
    try:
        assert _read_everything(broker.port) == [(o, v) for o, v in zip(offsets, values) if o != bad]
    finally:
        assert broker.terminate() == 0


def _verify(data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rill.broker.main", "--data-dir", str(data), "--verify-logs",
                           "--set", "log.segment.bytes=65536", *extra], capture_output=True, text=True, timeout=120)


def test_verify_refuses_a_directory_in_use(tmp_path: Path) -> None:
    """--verify-logs on a running broker's directory exits 1 and says to stop the broker."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        result = _verify(tmp_path / "data")
        assert result.returncode == 1 and "stop the broker" in result.stdout
    finally:
        assert broker.terminate() == 0
    assert os.path.isdir(tmp_path / "data")

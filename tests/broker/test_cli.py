"""The rill CLI (produce, consume, topics, perf) against a real in-process broker."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from rill.client.simple import SimpleConsumer, SimpleProducer

GRPC_LOG_LINE = re.compile(rb"[IWEF]\d{4} \d\d:\d\d:\d\d")  # glog's prefix, as gRPC's C core logs


@pytest.fixture(autouse=True)
def quiet_broker() -> Iterator[None]:
    """Keep stdout and stderr for the CLI: the in-process broker's log events are captured instead."""
    with capture_logs():
        yield


def rill(broker: RunningBroker, *argv: str) -> int:
    return main([*argv, "--broker", broker.address, "--timeout", "10"])


def produce(broker: RunningBroker, partition: int, payloads: list[bytes], topic: str = "t") -> None:
    """Produce with the library, outside the CLI."""
    with SimpleProducer(broker.host, broker.port) as p:
        p.send(topic, payloads, partition)


def feed_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_produce_then_consume_prints_every_line(broker: RunningBroker, monkeypatch: pytest.MonkeyPatch,
                                                capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """Lines produced from stdin (spread over both partitions) are all printed, one per line, by consume."""
    lines = [f"line {i}".encode() for i in range(500)]
    feed_stdin(monkeypatch, b"\n".join(lines) + b"\n")
    assert rill(broker, "produce", "--topic", "t", "--batch-size", "50") == 0
    assert b"500 messages" in capsysbinary.readouterr().err
    assert rill(broker, "consume", "--topic", "t") == 0
    out, err = capsysbinary.readouterr()
    assert sorted(out.splitlines()) == sorted(lines)
    assert b"Processed a total of 500 messages" in err


def test_produce_from_file_to_one_partition_with_offsets(broker: RunningBroker, tmp_path: Path,
                                                         capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """--file and --partition write there; --print-offset shows each message's partition and byte offset."""
    source = tmp_path / "input.txt"
    source.write_bytes(b"alpha\nbeta\n")
    assert rill(broker, "produce", "--topic", "t", "--partition", "1", "--file", str(source)) == 0
    capsysbinary.readouterr()
    assert rill(broker, "consume", "--topic", "t", "--partition", "1", "--print-offset") == 0
    assert capsysbinary.readouterr().out == b"Partition:1\tOffset:0\talpha\nPartition:1\tOffset:15\tbeta\n"


def test_consume_with_format_and_numeric_offset(broker: RunningBroker,
                                                capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """--offset N starts at that byte offset and --format renders kcat tokens."""
    produce(broker, 0, [b"a", b"bb", b"ccc"])
    capsysbinary.readouterr()
    assert rill(broker, "consume", "--topic", "t", "--partition", "0", "--offset", "11",
                "--format", "%t:%p:%o:%S:%s") == 0
    assert capsysbinary.readouterr().out == b"t:0:11:2:bb\nt:0:23:3:ccc\n"


def test_consume_latest_prints_nothing(broker: RunningBroker, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """--offset latest without --follow exits at once with nothing printed."""
    produce(broker, 0, [b"old"])
    capsysbinary.readouterr()
    assert rill(broker, "consume", "--topic", "t", "--offset", "latest") == 0
    out, err = capsysbinary.readouterr()
    assert out == b""
    assert b"Processed a total of 0 messages" in err


def test_consume_max_messages(broker: RunningBroker, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """--max-messages N prints exactly N messages."""
    produce(broker, 0, [b"1", b"2", b"3", b"4"])
    capsysbinary.readouterr()
    assert rill(broker, "consume", "--topic", "t", "--partition", "0", "--max-messages", "3", "-q") == 0
    assert capsysbinary.readouterr().out == b"1\n2\n3\n"


def test_follow_waits_for_new_messages(broker: RunningBroker, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """--follow keeps long-polling and prints messages produced after it started."""
    produce(broker, 0, [b"before"])
    capsysbinary.readouterr()

    def produce_later() -> None:
        time.sleep(0.5)
        produce(broker, 1, [b"after-1"])
        produce(broker, 0, [b"after-2"])

    thread = threading.Thread(target=produce_later)
    thread.start()
    code = rill(broker, "consume", "--topic", "t", "--follow", "--max-messages", "3", "--poll-ms", "200")
    thread.join()
    assert code == 0
    assert sorted(capsysbinary.readouterr().out.splitlines()) == [b"after-1", b"after-2", b"before"]


@pytest.mark.parametrize("acks, compression", [("none", "none"), ("fsync", "gzip"), ("append", "gzip")])
def test_produce_acks_and_compression(broker: RunningBroker, monkeypatch: pytest.MonkeyPatch,
                                      capsysbinary: pytest.CaptureFixture[bytes], acks: str, compression: str) -> None:
    """Every --acks and --compression choice delivers every line."""
    feed_stdin(monkeypatch, b"x\ny\nz\n")
    assert rill(broker, "produce", "--topic", "t", "--partition", "0", "--acks", acks,
                "--compression", compression, "--batch-size", "2") == 0
    capsysbinary.readouterr()
    assert rill(broker, "consume", "--topic", "t", "--partition", "0") == 0
    assert capsysbinary.readouterr().out == b"x\ny\nz\n"


def test_consume_unknown_topic_fails_cleanly(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Consuming a topic that does not exist exits 1 with a one-line error and no traceback."""
    assert rill(broker, "consume", "--topic", "ghost") == 1
    err = capsys.readouterr().err
    assert err.startswith("rill: error: topic 'ghost' does not exist")
    assert err.count("\n") == 1


def test_consume_bad_partition_and_offset_fail_cleanly(broker: RunningBroker,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A partition outside the topic and an out-of-range offset each exit 1 with a clear message."""
    produce(broker, 0, [b"a"])
    assert rill(broker, "consume", "--topic", "t", "--partition", "5") == 1
    assert "has 2 partition(s)" in capsys.readouterr().err
    assert rill(broker, "consume", "--topic", "t", "--partition", "0", "--offset", "5000") == 1
    assert "offset 5000 is out of range for t-0 (earliest 0, latest 11)" in capsys.readouterr().err
    assert rill(broker, "consume", "--topic", "t", "--partition", "0", "--offset", "3") == 1
    assert "not a message boundary" in capsys.readouterr().err


def test_topics_create_and_list(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """topics create makes a topic that topics list then prints with its partition count."""
    assert rill(broker, "topics", "create", "--topic", "orders", "--partitions", "4") == 0
    assert "Created topic orders with 4 partitions" in capsys.readouterr().out
    assert rill(broker, "topics", "list") == 0
    assert "orders\t4" in capsys.readouterr().out.splitlines()


def test_topics_create_refused_by_broker(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """A partition count the broker refuses exits 1 with the broker's reason."""
    assert rill(broker, "topics", "create", "--topic", "huge", "--partitions", "1000000") == 1
    err = capsys.readouterr().err
    assert "refused" in err and "Traceback" not in err


def test_consume_into_a_closed_pipe_exits_quietly(broker: RunningBroker) -> None:
    """`rill consume | head -1` prints one line and no BrokenPipe traceback."""
    produce(broker, 0, [b"%d" % i * 100 for i in range(20000)])
    command = (f"{sys.executable} -m rill.client.cli.main consume --topic t --partition 0 "
               f"--broker {broker.address} | head -1")
    done = subprocess.run(command, shell=True, capture_output=True, timeout=60)
    assert done.stdout == b"0" * 100 + b"\n"
    assert b"Traceback" not in done.stderr


def test_follow_interrupted_exits_130_with_a_summary(broker: RunningBroker) -> None:
    """Ctrl-C (SIGINT) during --follow exits 130, prints the summary and no traceback."""
    produce(broker, 0, [b"only"])
    # SIGINT as a terminal delivers it: a suite started in the background of a non-interactive shell runs
    # with SIGINT ignored, and a child inherits that (Python then installs no KeyboardInterrupt handler)
    process = subprocess.Popen([sys.executable, "-m", "rill.client.cli.main", "consume", "--topic", "t", "--follow",
                                "--broker", broker.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout is not None
    assert process.stdout.readline() == b"only\n"  # it is now long-polling
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130
    # gRPC's C core, loaded in this test process by earlier tests, may log a line into the child between
    # fork and exec (its fork handlers; CI saw "E1126 15:15:37 ..."): not the command's output
    err = b"".join(line for line in err.splitlines(keepends=True) if not GRPC_LOG_LINE.match(line))
    assert err == b"Processed a total of 1 messages\n"


# ---------------------------------------------------------------- perf


def test_perf_produce_then_consume(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """perf produce sends whole requests of batch x partitions messages; perf consume reads them all back."""
    assert rill(broker, "perf", "produce", "--topic", "bench", "--partitions", "3", "--message-size", "100",
                "--batch", "10", "--messages", "1000", "--inflight", "4", "--connections", "2", "--json") == 0
    produced = json.loads(capsys.readouterr().out)
    assert produced["messages"] == 1020  # 34 requests of 10 x 3
    assert produced["messages_per_s"] > 0
    assert produced["command"].startswith("rill perf produce --topic bench")
    with SimpleConsumer(broker.host, broker.port) as c:
        assert sum(c.latest_offset("bench", p) for p in range(3)) == 1020 * 110
    assert rill(broker, "perf", "consume", "--topic", "bench", "--fetch-size", "2000", "--json") == 0
    consumed = json.loads(capsys.readouterr().out)
    assert (consumed["messages"], consumed["payload_bytes"]) == (1020, 102000)


def test_perf_produce_text_report(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json perf produce prints messages/s, MB/s and the command line on stderr."""
    assert rill(broker, "perf", "produce", "--topic", "bench", "--messages", "100", "--acks", "fsync") == 0
    err = capsys.readouterr().err
    assert "messages/s" in err and "MB/s" in err
    assert "command: rill perf produce --topic bench --messages 100 --acks fsync" in err


def test_perf_produce_rejects_a_partition_mismatch(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """perf produce on an existing topic with another partition count exits 1."""
    with SimpleConsumer(broker.host, broker.port) as c:
        c.create_topic("bench", 2)
    assert rill(broker, "perf", "produce", "--topic", "bench", "--partitions", "3", "--messages", "10") == 1
    assert "exists with 2 partitions" in capsys.readouterr().err


def test_perf_latency_reports_percentiles(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """perf latency reports ordered p50 <= p99 <= p999 in microseconds for the measured sends."""
    assert rill(broker, "perf", "latency", "--topic", "lat", "--messages", "200", "--warmup", "10", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["messages"] == 200
    assert 0 < result["p50_us"] <= result["p99_us"] <= result["p999_us"] <= result["max_us"]
    with SimpleConsumer(broker.host, broker.port) as c:
        assert c.latest_offset("lat", 0) == 210 * 210

"""The rill CLI without a broker: argument parsing, output formats, helpers, error exits."""

from __future__ import annotations

import io
import json
import socket

import pytest

from rill.client.cli import consume, produce
from rill.client.cli.formatting import compile_format, unescape
from rill.client.cli.main import build_parser, main
from rill.client.cli.perf.broker_requests import produce_frames
from rill.client.cli.perf.report import percentile
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import Message, decode_message_set

MSG = Message("clicks", 2, 120, 135, b"hello")


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize("fmt, expected", [
    ("%s", b"hello\n"),
    ("%s\\n", b"hello\n"),
    ("%t/%p@%o..%n %S", b"clicks/2@120..135 5\n"),
    ("%k|%K|%s", b"|-1|hello\n"),
    ("100%% %s", b"100% hello\n"),
    ("%s\\t\\x41", b"hello\tA\n"),
    ("plain", b"plain\n"),
])
def test_format_tokens(fmt: str, expected: bytes) -> None:
    """kcat-style tokens and escapes render one message, ending in exactly one newline."""
    assert compile_format(fmt)(MSG) == expected


def test_print_offset_format_matches_console_consumer() -> None:
    """--print-offset prefixes Partition:P and Offset:O, tab-separated, like kafka-console-consumer."""
    args = build_parser().parse_args(["consume", "-t", "x", "--print-offset"])
    assert compile_format(consume.output_format(args))(MSG) == b"Partition:2\tOffset:120\thello\n"


@pytest.mark.parametrize("fmt", ["%x", "%", "%s\\q", "\\x4", "abc\\"])
def test_bad_formats_raise_value_error(fmt: str) -> None:
    """Unknown tokens, unknown escapes and truncated escapes raise ValueError."""
    with pytest.raises(ValueError):
        compile_format(fmt)


def test_unescape_keeps_non_ascii_as_utf8() -> None:
    """Characters outside ASCII are written as UTF-8."""
    assert unescape("é\\0") == "é".encode() + b"\0"


# ---------------------------------------------------------------- argument parsing


def test_consume_defaults() -> None:
    """consume defaults to localhost:9092, every partition, the earliest offset, no follow."""
    args = build_parser().parse_args(["consume", "--topic", "t"])
    assert args.broker == ("localhost", 9092)
    assert (args.partition, args.offset, args.follow, args.max_messages) == (None, "earliest", False, None)


@pytest.mark.parametrize("text, expected", [
    ("earliest", "earliest"), ("beginning", "earliest"), ("LATEST", "latest"), ("end", "latest"), ("42", 42)])
def test_parse_offset(text: str, expected: str | int) -> None:
    """--offset takes earliest/latest (and kcat's beginning/end) or a byte offset."""
    assert consume.parse_offset(text) == expected


def test_broker_aliases_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """-b, --broker and --bootstrap-server set the broker; $RILL_BROKER sets the default."""
    parser = build_parser()
    assert parser.parse_args(["topics", "list", "--bootstrap-server", "h:1"]).broker == ("h", 1)
    assert parser.parse_args(["topics", "list", "-b", "h2"]).broker == ("h2", 9092)
    monkeypatch.setenv("RILL_BROKER", "envhost:7")
    assert build_parser().parse_args(["topics", "list"]).broker == ("envhost", 7)


@pytest.mark.parametrize("argv", [
    ["consume", "--topic", "t", "--offset", "-3"],
    ["consume", "--topic", "t", "--offset", "soon"],
    ["consume", "--topic", "bad/name"],
    ["consume", "--topic", "t", "--broker", "h:99999"],
    ["consume", "--topic", "t", "--offset", "latest", "--from-beginning"],
    ["produce", "--topic", "t", "--acks", "maybe"],
    ["topics", "create", "--topic", "t", "--partitions", "0"],
    ["topics"],
    ["perf", "produce", "--topic", "t", "--batch", "0"],
    [],
])
def test_bad_usage_exits_2_with_a_message(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Bad arguments exit with status 2 and a usage error on stderr, before any connection."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err
    assert "Traceback" not in err


def test_numeric_offset_needs_a_partition(capsys: pytest.CaptureFixture[str]) -> None:
    """--offset N without --partition is a usage error (a byte offset belongs to one partition)."""
    assert main(["consume", "--topic", "t", "--offset", "10", "--broker", f"127.0.0.1:{free_port()}"]) == 2
    assert "--partition" in capsys.readouterr().err


def test_bad_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown --format token exits 2 and names the token."""
    assert main(["consume", "--topic", "t", "--format", "%q", "--broker", f"127.0.0.1:{free_port()}"]) == 2
    assert "%q" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["topics", "list"], ["consume", "--topic", "t"],
                                  ["topics", "create", "--topic", "t", "--partitions", "1"],
                                  ["perf", "latency", "--topic", "t"]])
def test_connection_refused_exits_1_without_traceback(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable broker gives exit status 1 and one 'cannot connect' line, no traceback."""
    address = f"127.0.0.1:{free_port()}"
    assert main([*argv, "--broker", address, "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert f"cannot connect to broker {address}" in err
    assert "Traceback" not in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """--help prints usage and exits 0."""
    assert main(["consume", "--help"]) == 0
    assert "--follow" in capsys.readouterr().out


# ---------------------------------------------------------------- produce helpers


def test_read_lines_strips_only_the_newline() -> None:
    """Each line loses its trailing \\n only; empty lines and a last unterminated line are kept."""
    stream = io.BytesIO(b"a\n\n b \r\nlast")
    assert list(produce.read_lines(stream)) == [b"a", b"", b" b \r", b"last"]


def test_batches_split_at_the_batch_size() -> None:
    """Lines are grouped into batches of batch-size, the last one shorter."""
    assert list(produce.batches(iter([b"1", b"2", b"3", b"4", b"5"]), 2)) == [[b"1", b"2"], [b"3", b"4"], [b"5"]]


# ---------------------------------------------------------------- perf helpers


def test_perf_produce_frames_carry_a_batch_per_partition() -> None:
    """Each pre-encoded frame is a PRODUCE_ACK with `batch` valid messages of the size for every partition."""
    frames = produce_frames("t", 3, 5, 40, rq.Acks.FSYNC, pool=2)
    assert len(frames) == 2 and frames[0] != frames[1]
    for frame in frames:
        kind, request = rq.decode_request(frame[4:])
        assert kind == rq.RequestType.PRODUCE_ACK
        assert isinstance(request, rq.ProduceAckRequest) and request.acks == rq.Acks.FSYNC
        assert [p.partition for p in request.produces] == [0, 1, 2]
        for p in request.produces:
            messages, _ = decode_message_set(p.messages)
            assert [len(msg.value) for msg in messages] == [40] * 5


@pytest.mark.parametrize("q, expected", [(0.5, 50), (0.99, 99), (0.999, 100), (0.0, 1), (1.0, 100)])
def test_percentile_nearest_rank(q: float, expected: int) -> None:
    """Percentiles use the nearest rank of the sorted samples."""
    assert percentile(list(range(1, 101)), q) == expected


def test_perf_crc_prints_both_throughputs_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """rill perf crc --json reports crcmod and zlib throughput for 200 B and 10 KB, and the command."""
    assert main(["perf", "crc", "--seconds", "0.005", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [c["size"] for c in result["cases"]] == [200, 10240]
    assert all(c["crcmod_mb_per_s"] > 0 and c["zlib_mb_per_s"] > 0 for c in result["cases"])
    assert result["command"] == "rill perf crc --seconds 0.005 --json"

"""The arguments of ``rill groups rewind`` (``reset-offsets``) and the flags every command shares, without a
broker: Kafka's date and duration formats, ``TOPIC:P,P``, ``--by-duration -1h``, ``--bootstrap-server`` lists."""

from __future__ import annotations

import argparse
import socket
from datetime import datetime

import pytest

from rill.client.cli.groups_describe import assignment_text
from rill.client.cli.main import build_parser, main
from rill.client.cli.reset_targets import (duration_ms, join_dash_values, parse_datetime_ms, parse_duration_ms,
                                           topic_spec)


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


@pytest.mark.parametrize("text, ms", [
    ("PT1H", 3_600_000), ("pt30m", 1_800_000), ("P1DT12H", 129_600_000), ("PT0.5S", 500), ("P2D", 172_800_000),
    ("-PT1H", 3_600_000), ("-1h", 3_600_000), ("1h", 3_600_000), ("1h30m", 5_400_000), ("2d", 172_800_000),
    ("90s", 90_000), ("500ms", 500), ("+1m30s", 90_000)])
def test_durations_in_kafkas_and_the_short_form(text: str, ms: int) -> None:
    """Kafka's PnDTnHnMnS and the short 1h30m form give the same lengths; a sign changes nothing."""
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "1", "-1", "P", "PT", "P1DT", "1x", "h1", "1h 30m", "PT1H30"])
def test_bad_durations_are_refused(text: str) -> None:
    """Anything else is an argparse error naming both forms."""
    with pytest.raises(argparse.ArgumentTypeError, match="PnDTnHnMnS"):
        duration_ms(text)


def test_duration_counts_back_from_now() -> None:
    """-1h and PT1H both mean an hour before now (milliseconds since the epoch)."""
    assert parse_duration_ms("-1h", now=7200.0) == 3_600_000
    assert parse_duration_ms("PT30M", now=3600.0) == 1_800_000


def test_datetimes_in_kafkas_format_and_iso_8601() -> None:
    """Kafka's YYYY-MM-DDTHH:mm:SS.sss is local time, as Kafka reads it; a zone or Z is honoured."""
    assert parse_datetime_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_datetime_ms("1970-01-01T01:00:02.500+01:00") == 2500
    local = datetime(2026, 11, 20, 9, 0, 0, 123000).timestamp()
    assert parse_datetime_ms("2026-11-20T09:00:00.123") == int(local * 1000)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_datetime_ms("yesterday")


def test_topic_specs() -> None:
    """TOPIC is every partition, TOPIC:0,2 some (sorted, without repeats); bad names and lists are refused."""
    assert topic_spec("orders") == ("orders", ())
    assert topic_spec("orders:2,0,2") == ("orders", (0, 2))
    for bad in ("orders:", "orders:x", "orders:-1", "bad/name:0"):
        with pytest.raises(argparse.ArgumentTypeError):
            topic_spec(bad)


def test_dash_values_are_joined_to_their_option() -> None:
    """--by-duration -1h becomes --by-duration=-1h; options and other values are left alone."""
    assert join_dash_values(["--by-duration", "-1h", "--execute"]) == ["--by-duration=-1h", "--execute"]
    assert join_dash_values(["--by-duration", "-PT1H"]) == ["--by-duration=-PT1H"]
    assert join_dash_values(["--by-duration", "--execute"]) == ["--by-duration", "--execute"]
    assert join_dash_values(["--shift-by", "-3"]) == ["--shift-by", "-3"]


def test_documented_by_duration_reaches_the_broker(capsys: pytest.CaptureFixture[str]) -> None:
    """`--by-duration -1h` parses: the command gets as far as connecting (exit 1), not a usage error (2)."""
    address = f"127.0.0.1:{free_port()}"
    assert main(["groups", "rewind", "app", "--topic", "t", "--by-duration", "-1h", "--bootstrap-server", address,
                 "--timeout", "2"]) == 1
    assert f"cannot connect to broker {address}" in capsys.readouterr().err


def test_rewind_arguments() -> None:
    """reset-offsets is rewind; --shift-by takes a negative count; the plan is the default (no --execute)."""
    args = build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--topic", "t:1", "--shift-by",
                                      "-2"])
    assert (args.group_option, args.topic, args.shift_by, args.execute) == (["g"], [("t", (1,))], -2, False)
    args = build_parser().parse_args(["groups", "rewind", "g", "--all-topics", "--to-latest", "--execute"])
    assert (args.group, args.all_topics, args.to_latest, args.execute) == ("g", True, True, True)
    for argv in (["--topic", "t"], ["--to-latest"], ["--topic", "t", "--all-topics", "--to-latest"],
                 ["--topic", "t", "--to-latest", "--dry-run", "--execute"],
                 ["--topic", "t", "--to-latest", "--to-earliest"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["groups", "rewind", "g", *argv])


def test_bootstrap_server_takes_a_list() -> None:
    """--bootstrap-server (and -b, --broker) takes comma-separated HOST[:PORT]s; the first is the broker."""
    args = build_parser().parse_args(["groups", "list", "--bootstrap-server", "h1:1,h2"])
    assert (args.bootstrap, args.broker) == ([("h1", 1), ("h2", 9092)], ("h1", 1))
    assert build_parser().parse_args(["topics", "describe", "-b", "h:5"]).bootstrap == [("h", 5)]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["groups", "list", "--bootstrap-server", ","])


def test_assignment_column_as_kafka_prints_it() -> None:
    """ASSIGNMENT lists each topic's partitions in order: t(0,2,10),u(1); 0.7 names sort as strings; none is -."""
    assert assignment_text([("u", 1), ("t", 10), ("t", 0), ("t", 2)]) == "t(0,2,10),u(1)"
    assert assignment_text([("t", "1-0"), ("t", "0-1")]) == "t(0-1,1-0)"
    assert assignment_text([]) == "-"


def test_consume_group_refuses_partition_and_numeric_offset(capsys: pytest.CaptureFixture[str]) -> None:
    """--group takes what the coordinator assigns: --partition or --offset N with it is a usage error."""
    address = f"127.0.0.1:{free_port()}"
    assert main(["consume", "--topic", "t", "--group", "g", "--partition", "0", "--broker", address]) == 2
    assert main(["consume", "--topic", "t", "-G", "g", "--offset", "0", "--broker", address]) == 2
    assert "--group" in capsys.readouterr().err

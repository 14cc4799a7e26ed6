"""``rill groups rewind`` / ``reset-offsets`` as kafka-consumer-groups --reset-offsets: a plan, then --execute,
against an in-process broker (index entries every 64 bytes, so a walk back jumps between several)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker, running_broker
from rill.client.cli.groups_reset import PLAN_HEADER
from rill.client.cli.main import main
from rill.client.grpc_client import AdminClient
from rill.client.protocol.messages import CODEC_GZIP
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.v1 import coordinator_pb2 as pb

PAYLOADS = [b"m%d-" % i + b"x" * (i % 7) for i in range(30)]  # sizes differ: offsets are not i * size


@pytest.fixture
def small_index(tmp_path: Path) -> Iterator[RunningBroker]:
    with capture_logs(), running_broker(tmp_path / "data", num_partitions=2, log_index_interval_bytes=64) as b:
        yield b


@pytest.fixture
def boundaries(small_index: RunningBroker) -> list[int]:
    """30 messages in events-0 (in 6 appends), 1 in events-1, group app: the offset of each message of
    events-0, then its end."""
    with SimpleProducer(small_index.host, small_index.port) as producer:
        for i in range(0, 30, 5):
            producer.send("events", PAYLOADS[i:i + 5], partition=0)
        producer.send("events", [b"other"], partition=1)
    with SimpleConsumer(small_index.host, small_index.port) as consumer:
        messages = consumer.fetch("events", 0, 0, 1 << 20)
        assert len(consumer.time_index("events", 0, 0)) > 4  # a walk back jumps between index entries
    assert [m.value for m in messages] == PAYLOADS
    with AdminClient(small_index.grpc_address) as admin:
        assert admin.create_group("app", ["events"]).error_code == pb.NONE
    return [m.offset for m in messages] + [messages[-1].next_offset]


def rewind(broker: RunningBroker, *argv: str) -> int:
    return main(["groups", "rewind", "app", *argv, "--bootstrap-server", broker.address])


def committed(broker: RunningBroker, group: str = "app") -> dict[tuple[str, int], int]:
    with AdminClient(broker.grpc_address) as admin:
        return {(o.topic, o.partition): o.offset for o in admin.fetch_offsets(group).offsets}


def commit(broker: RunningBroker, topic: str, partition: int, offset: int, group: str = "app") -> None:
    with AdminClient(broker.grpc_address) as admin:
        assert admin.commit(group, [(topic, partition, offset)]).error_code == pb.NONE


def plan(capsys: pytest.CaptureFixture[str]) -> dict[tuple[str, int], int]:
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == PLAN_HEADER
    rows = [line.split("\t") for line in lines[1:]]
    assert all(r[0] == "app" for r in rows)
    return {(r[1], int(r[2])): int(r[3]) for r in rows}


def test_the_plan_moves_nothing_until_execute(small_index: RunningBroker, boundaries: list[int],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without --execute (or with --dry-run) the plan is printed and nothing moves; --execute moves it."""
    commit(small_index, "events", 0, boundaries[-1])
    assert rewind(small_index, "--topic", "events", "--to-earliest") == 0
    assert plan(capsys) == {("events", 0): 0, ("events", 1): 0}
    assert main(["groups", "reset-offsets", "--group", "app", "--topic", "events", "--to-earliest", "--dry-run",
                 "--bootstrap-server", small_index.address]) == 0
    out, err = capsys.readouterr()
    assert "Dry run: nothing moved" in err and out.startswith(PLAN_HEADER)
    assert committed(small_index) == {("events", 0): boundaries[-1]}
    assert rewind(small_index, "--topic", "events:0", "--to-earliest", "--execute") == 0
    assert plan(capsys) == {("events", 0): 0}
    assert committed(small_index) == {("events", 0): 0}


def test_to_offset_is_clamped_to_the_log_and_must_be_a_boundary(small_index: RunningBroker, boundaries: list[int],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """--to-offset past the end is set to the end with Kafka's warning; inside a message it is refused."""
    assert rewind(small_index, "--topic", "events:0", "--to-offset", "999999") == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1] == f"app\tevents\t0\t{boundaries[-1]}"
    assert f"New offset (999999) is higher than latest offset for topic partition events-0. Value will be set " \
           f"to {boundaries[-1]}" in err
    assert rewind(small_index, "--topic", "events:0", "--to-offset", str(boundaries[3]), "--execute") == 0
    assert committed(small_index) == {("events", 0): boundaries[3]}
    capsys.readouterr()
    assert rewind(small_index, "--topic", "events:0", "--to-offset", str(boundaries[3] + 1), "--execute") == 1
    assert "INVALID_OFFSET" in capsys.readouterr().err
    assert committed(small_index) == {("events", 0): boundaries[3]}


@pytest.mark.parametrize("start, shift, expected", [(20, -7, 13), (20, 4, 24), (20, -20, 0), (20, -25, 0),
                                                    (20, 10, 30), (20, 99, 30), (0, 1, 1), (30, -1, 29)])
def test_shift_by_walks_message_boundaries(small_index: RunningBroker, boundaries: list[int], start: int,
                                           shift: int, expected: int, capsys: pytest.CaptureFixture[str]) -> None:
    """--shift-by N moves the committed offset N messages (not bytes), clamped to the log."""
    commit(small_index, "events", 0, boundaries[start])
    assert rewind(small_index, "--topic", "events:0", "--shift-by", str(shift), "--execute") == 0
    assert plan(capsys) == {("events", 0): boundaries[expected]}
    assert committed(small_index)[("events", 0)] == boundaries[expected]


def test_shift_by_steps_over_a_compressed_wrapper_at_once(small_index: RunningBroker,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Three messages gzipped into one wrapper are one step: a consumer can start only before or after it."""
    with SimpleProducer(small_index.host, small_index.port) as plain, \
            SimpleProducer(small_index.host, small_index.port, codec=CODEC_GZIP) as gzipped:
        first = plain.send("zipped", [b"a"], partition=0)
        wrapper = gzipped.send("zipped", [b"b", b"c", b"d"], partition=0)
        last = plain.send("zipped", [b"e"], partition=0)
    with AdminClient(small_index.grpc_address) as admin:
        assert admin.commit("app", [("zipped", 0, first.next_offset)]).error_code == pb.NONE
    assert rewind(small_index, "--topic", "zipped:0", "--shift-by", "1") == 0
    assert plan(capsys) == {("zipped", 0): wrapper.next_offset}
    commit(small_index, "zipped", 0, last.next_offset)
    assert rewind(small_index, "--topic", "zipped:0", "--shift-by", "-2") == 0
    assert plan(capsys) == {("zipped", 0): first.next_offset}


def test_shift_by_needs_a_committed_offset(small_index: RunningBroker, boundaries: list[int],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A partition without a committed offset cannot be shifted: the command names it; --all-topics shifts
    only the committed ones, as Kafka."""
    commit(small_index, "events", 0, boundaries[10])
    assert rewind(small_index, "--topic", "events", "--shift-by", "-1") == 1
    assert "none for events-1" in capsys.readouterr().err
    assert rewind(small_index, "--all-topics", "--shift-by", "-1") == 0
    assert plan(capsys) == {("events", 0): boundaries[9]}


def test_times_and_durations(small_index: RunningBroker, boundaries: list[int],
                             capsys: pytest.CaptureFixture[str]) -> None:
    """--to-datetime (Kafka's format, local time; or ISO 8601) and --by-duration (-1h as documented, PT1H):
    a time before every message is the log start, a time after them the end."""
    for argv in (["--to-datetime", "2001-01-01T00:00:00.000"], ["--to-datetime", "2001-01-01T00:00:00Z"],
                 ["--by-duration", "-1h"], ["--by-duration", "PT1H"], ["--to-time", "2001-01-01T00:00:00+02:00"]):
        assert rewind(small_index, "--topic", "events", *argv) == 0, argv
        assert plan(capsys) == {("events", 0): 0, ("events", 1): 0}, argv
    assert rewind(small_index, "--topic", "events:0", "--to-datetime", "2999-01-01T00:00:00.000") == 0
    assert plan(capsys) == {("events", 0): boundaries[-1]}


def test_all_topics_covers_the_groups_topics_and_commits(small_index: RunningBroker, boundaries: list[int],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """--all-topics takes the group's topics and the topics it committed offsets for; --to-latest their ends."""
    with SimpleProducer(small_index.host, small_index.port) as producer:
        ack = producer.send("audit", [b"x", b"y"], partition=1)
    commit(small_index, "audit", 1, 0)
    with SimpleConsumer(small_index.host, small_index.port) as consumer:
        other_end = consumer.latest_offset("events", 1)
    assert rewind(small_index, "--all-topics", "--to-latest", "--execute") == 0
    assert plan(capsys) == {("events", 0): boundaries[-1], ("events", 1): other_end, ("audit", 0): 0,
                            ("audit", 1): ack.next_offset}
    assert committed(small_index)[("audit", 1)] == ack.next_offset


def test_unknown_groups_and_topics_are_named(small_index: RunningBroker, boundaries: list[int],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A group or topic that does not exist is an error that names it."""
    assert main(["groups", "rewind", "ghost", "--topic", "events", "--to-earliest",
                 "--bootstrap-server", small_index.address]) == 1
    assert "group 'ghost' does not exist" in capsys.readouterr().err
    assert rewind(small_index, "--topic", "nosuch", "--to-offset", "0") == 1
    assert "unknown topic(s): nosuch" in capsys.readouterr().err

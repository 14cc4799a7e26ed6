"""The console's pure parts: bounded series and rates, chart geometry, value rendering, form parsing, tokens."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from rill.client.cli.rewind_plan import RewindRequest
from rill.client.console.console_app import Console, ConsoleSettings, allowed_hosts
from rill.client.console.console_errors import InvalidInput, Offline, problem_of
from rill.client.console.console_format import human_bytes, human_rate, human_seconds, offset_text
from rill.client.console.lag_chart import HEIGHT, line_chart, nice_top
from rill.client.console.lag_sampler import LagPoint, LagSampler, SamplerStatus
from rill.client.console.message_browser import MAX_SHOWN_BYTES, _leader, render_value
from rill.client.console.rewind_flow import RewindFlow, request_from_form
from rill.client.console.sample_series import TimeSeries, rate
from rill.client.console.topic_overview import PartitionRow, TopicView
from rill.client.errors import ConnectionClosed
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb


def test_a_series_keeps_only_its_window_and_at_most_maxlen_samples() -> None:
    """Samples older than the window go when a newer one arrives; a full deque drops its oldest."""
    series: TimeSeries[int] = TimeSeries(window=10.0, maxlen=5)
    for t in range(8):
        series.add(float(t), t)
    assert series.points() == [(3.0, 3), (4.0, 4), (5.0, 5), (6.0, 6), (7.0, 7)]
    series.add(20.0, 20)
    assert series.points() == [(20.0, 20)] and series.last() == (20.0, 20)


def test_the_rate_is_the_growth_over_the_span_and_restarts_after_a_drop() -> None:
    """Bytes per second from the oldest sample in the span; a counter that fell (a topic made anew) is measured
    from after the fall; one sample is not enough."""
    series: TimeSeries[int] = TimeSeries(window=600.0, maxlen=100)
    series.add(0.0, 0)
    assert rate(series, 30) is None
    for t, end in ((10.0, 1000), (20.0, 3000), (30.0, 4000)):
        series.add(t, end)
    assert rate(series, 30) == pytest.approx(4000 / 30)
    assert rate(series, 15) == pytest.approx(1000 / 10)  # only the samples at 20 and 30 s
    series.add(40.0, 100)  # dropped: deleted and created again
    series.add(50.0, 600)
    assert rate(series, 60) == pytest.approx(500 / 10)


def test_the_chart_draws_known_samples_and_breaks_the_line_at_unknown_ones() -> None:
    """Each known sample is a vertex scaled to a 1-2-5 top; None starts a new stroke; older samples are left out."""
    chart = line_chart([(0.0, 5.0), (50.0, 10.0), (60.0, None), (70.0, 40.0), (100.0, 80.0)], now=100.0,
                       window=60.0, label=lambda v: f"{v:g}")
    assert chart.points == 3 and chart.last == 80.0 and chart.top == 100.0 and chart.top_label == "100"
    assert chart.path.count("M") == 2 and chart.path.count("L") == 1
    assert chart.last_xy is not None and chart.last_xy[0] == chart.right_edge
    assert chart.last_xy[1] == pytest.approx(chart.top_edge + (HEIGHT - 24 - 12) * 0.2)
    assert line_chart([], now=1.0, window=10.0, label=str).path == ""
    assert [nice_top(v) for v in (0, 1, 1.5, 3, 7, 10, 11, 4000)] == [1, 1, 2, 5, 10, 10, 20, 5000]


def test_values_are_shown_as_text_json_or_hex_with_a_note_when_they_are_not() -> None:
    """JSON is pretty-printed; a value that is not JSON or not UTF-8 says so; hex is a 16-bytes-a-line dump."""
    assert render_value(b'{"a":[1,2]}', "json") == ('{\n  "a": [\n    1,\n    2\n  ]\n}', "")
    assert render_value(b"plain", "json") == ("plain", "not JSON: shown as text")
    text, note = render_value(b"\xff\xfeok", "text")
    assert text == "\ufffd\ufffdok" and "not valid UTF-8" in note
    assert render_value(b"AB\x00", "hex")[0] == "00000000  41 42 00" + " " * 40 + "  |AB.|"
    long = b"x" * (MAX_SHOWN_BYTES + 10)
    text, note = render_value(long, "text")
    assert len(text) == MAX_SHOWN_BYTES and note == f"the first {MAX_SHOWN_BYTES} of {len(long)} bytes"


def test_numbers_are_written_for_people_and_unknowns_as_a_dash() -> None:
    """Bytes in binary units, rates per second, durations in the largest two units; None and -1 are ``-``."""
    assert [human_bytes(v) for v in (None, -1, 0, 1023, 1536, 5 * 1024 ** 3)] == ["-", "-", "0 B", "1023 B",
                                                                                 "1.5 KiB", "5.0 GiB"]
    assert [human_rate(v) for v in (None, 0.0, 0.5, 2048.0)] == ["-", "0 B/s", "0.50 B/s", "2.0 KiB/s"]
    assert [human_seconds(v) for v in (None, -1, 0.4, 75, 7300, 90000)] == ["-", "-", "0.4 s", "1m 15s", "2h 1m",
                                                                           "1d 1h"]
    assert [offset_text(v) for v in (None, -1, 0, 42)] == ["-", "-", "0", "42"]


def test_a_loopback_console_answers_only_its_own_host_names() -> None:
    """DNS rebinding: on a loopback address only loopback names are answered; elsewhere any."""
    assert allowed_hosts("127.0.0.1") == ("localhost", "127.0.0.1", "::1", "[::1]")
    assert "my-host" not in allowed_hosts("localhost")
    assert allowed_hosts("0.0.0.0") == ("*",) and allowed_hosts("console.example") == ("*",)


def test_the_rewind_form_becomes_the_cli_request_or_a_plain_refusal() -> None:
    """Each target as ``rill groups rewind`` takes it; a duration becomes its moment once."""
    assert request_from_form({"target": "earliest"}) == RewindRequest(None, to_earliest=True)
    assert request_from_form({"topic": "t", "partitions": "2,0", "target": "offset", "value": "64"}) == \
        RewindRequest((("t", (0, 2)),), to_offset=64)
    assert request_from_form({"topic": "t", "target": "shift", "value": "-3"}) == RewindRequest((("t", ()),),
                                                                                           shift_by=-3)
    assert request_from_form({"target": "duration", "value": "PT1H"}, now=10_000.0).to_time_ms == 10_000_000 - 3_600_000
    assert request_from_form({"target": "datetime", "value": "2026-01-01T00:00:00Z"}).to_time_ms == 1767225600000
    for form, says in (({"target": "offset", "value": "x"}, "whole number"), ({"target": "offset", "value": "-1"},
                       "at least 0"), ({"target": "sideways"}, "choose where"), ({"topic": "a b", "target": "latest"},
                       "invalid topic name"), ({"target": "duration", "value": "soon"}, "not a duration")):
        with pytest.raises(InvalidInput, match=says):
            request_from_form(form)


def test_a_confirmation_not_signed_by_this_console_moves_nothing() -> None:
    """An edited plan, another group's plan, a made-up token or an old plan is refused before any call is made
    (the flow has no cluster here: a call would fail the test)."""
    flow = RewindFlow(cast(Any, None), key=b"k" * 32, clock=lambda: 1000.0)
    plan = flow._signed("app", RewindRequest(None, to_latest=True), (("t", 0, 64),), {}, (), 1000)
    form = {"request": plan.request_json, "offsets": plan.offsets_json, "issued": str(plan.issued), "token": plan.token}
    edited = {**form, "offsets": json.dumps([["t", 0, 0]])}
    for group, bad in (("app", edited), ("other", form), ("app", {**form, "token": "00" * 32})):
        with pytest.raises(InvalidInput, match="not issued by this console"):
            flow.confirm(group, bad)
    late = RewindFlow(cast(Any, None), key=b"k" * 32, clock=lambda: 1000.0 + 3600)
    with pytest.raises(InvalidInput, match="minutes old"):
        late.confirm("app", form)


class FakeCluster:
    """What the sampler asks of ClusterAccess and AdminClient, answered from dicts the test changes."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        self.lags: dict[str, int | None] = {}  # None: the group's DescribeGroup fails

    def admin_call(self, call: Any) -> Any:
        return call(self)

    def coordinator(self, info: Any, brokers: Any = None) -> Any:
        return self

    def describe_topics(self) -> apb.DescribeTopicsResponse:
        topics: dict[str, list[apb.PartitionDescription]] = {}
        for (t, p), end in self.ends.items():
            topics.setdefault(t, []).append(apb.PartitionDescription(partition=p, end_offset=end))
        return apb.DescribeTopicsResponse(topics=[apb.TopicDescription(topic=t, partitions=ps)
                                                  for t, ps in topics.items()])

    def list_groups(self) -> pb.ListGroupsResponse:
        return pb.ListGroupsResponse(groups_info=[pb.GroupInfo(group_name=g) for g in self.lags])

    def describe_group(self, group: str) -> apb.DescribeGroupResponse:
        lag = self.lags[group]
        if lag is None:
            raise ConnectionClosed("coordinator down")
        return apb.DescribeGroupResponse(consumer_group=group, partitions=[
            apb.PartitionLag(topic="t", partition=0, lag_bytes=lag, lag_seconds=1.5),
            apb.PartitionLag(topic="t", partition=1, lag_bytes=-1, lag_seconds=-1)])


def test_the_sampler_keeps_a_bounded_window_and_forgets_only_what_is_gone() -> None:
    """Lag and end offsets are recorded each round; a failed describe keeps the group's history (and is reported);
    a group no longer listed is forgotten; the window bounds what is kept."""
    cluster, now = FakeCluster(), [0.0]
    sampler = LagSampler(cast(Any, cluster), interval=1.0, window=3.0, clock=lambda: now[0])
    cluster.ends, cluster.lags = {("t", 0): 0}, {"app": 10, "gone": 1}
    for step in range(5):
        now[0] = float(step)
        cluster.ends[("t", 0)] = 100 * step
        sampler.sample_once()
    assert [t for t, _ in sampler.lag_history("app")] == [1.0, 2.0, 3.0, 4.0]  # 3 s window
    assert sampler.latest_lag("app") == LagPoint(10, 1.5)  # the unknown partition (-1) left out
    assert sampler.append_rate("t", 0) == pytest.approx(100.0)
    cluster.lags = {"app": None}
    now[0] = 5.0
    sampler.sample_once()
    assert len(sampler.lag_history("app")) == 4 and sampler.lag_history("gone") == []
    assert sampler.status().rounds == 6 and sampler.status().errors == ("group app: Broker unreachable: "
                                                                        "coordinator down",)


def test_an_offline_partition_is_said_plainly_on_its_topic_page_and_in_the_browser() -> None:
    """A partition without a live leader is marked offline with unknown offsets; reading it is an Offline problem."""
    console = Console(cast(Any, None), ConsoleSettings())
    view = TopicView("t", 2, True, {}, (
        PartitionRow(0, -1, (1, 2), (), 4, True, -1, -1, 0, None),
        PartitionRow(1, 2, (2, 1), (2, 1), 3, False, 0, 64, 64, 12.0)))
    html = console.templates.get_template("topic_live.html").render(
        view=view, problem=None, settings=console.settings, sampler=SamplerStatus(0, 0.0, ()), now=0.0)
    offline_row = html.split('data-partition="0"')[1].split("</tr>")[0]
    assert "offline (no live leader)" in offline_row and '<td class="num end">-</td>' in offline_row
    assert "1 offline: their leader broker is down" in html and "12 B/s" in html

    class DownReader:
        def partitions(self) -> int:
            return 2

        def available(self, partition: int) -> bool:
            return False

    with pytest.raises(Offline, match="t-1 is offline: its leader broker is not alive") as raised:
        _leader(cast(Any, DownReader()), "t", 1)
    assert problem_of(raised.value).status == 503

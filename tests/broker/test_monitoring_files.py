"""docs/monitoring: the Grafana dashboard and the Prometheus alert rules are well formed, their PromQL passes a
few sanity checks, and every rill_ and process_ metric they query is exposed by a live broker.

The PromQL checks are deliberately small (no parser): brackets balance; rate(), irate() and increase() read
counters and histogram series only (names ending in ``_total``, ``_bucket``, ``_count``, ``_sum``) and those
are never read raw; histogram_quantile() reads ``_bucket`` series and keeps ``le`` when it aggregates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from rill.broker.testing import running_broker
from rill.client.admin import AdminClient
from rill.client.producer import Producer
from rill.client.simple import SimpleConsumer
from tests.prometheus_scrape import broker_exposition

MONITORING = Path(__file__).parents[2] / "docs" / "monitoring"
DASHBOARD = MONITORING / "rill-dashboard.json"
ALERTS = MONITORING / "rill-alerts.yml"

REQUIRED_ALERTS = {
    "RillBrokerDown", "RillNoActiveController", "RillOfflinePartitions", "RillUnderReplicatedPartitions",
    "RillUnderMinIsr", "RillOfflineLogs", "RillConsumerLagHigh", "RillDiskNearlyFull", "RillFsyncSlow",
    "RillRequestErrors", "RillFileDescriptorsNearlyExhausted", "RillGroupRebalancingTooOften", "RillReplicaLagging",
}
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__all"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_METRIC = re.compile(r"(?<![\w:$])((?:rill|process)_[A-Za-z0-9_]+|up)\b(?!\s*\()")
_SERIES = re.compile(r"(?<![\w:$])([A-Za-z_:][\w:]*)(?=\s*[{\[])")
_COUNTER_LIKE = ("_total", "_bucket", "_count", "_sum")


# ---------------------------------------------------------------- reading the files

def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", ())


def panel_exprs(board: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in panels(board) for target in panel.get("targets", ())]


def variable_queries(board: dict[str, Any]) -> list[str]:
    return [var["definition"] for var in board["templating"]["list"] if var["type"] == "query"]


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"]
                                   for rule in group["rules"]]
    return rules


def all_exprs() -> list[str]:
    board = dashboard()
    return panel_exprs(board) + variable_queries(board) + [rule["expr"] for rule in alert_rules()]


def metric_names(expr: str) -> set[str]:
    """The rill_, process_ and up series an expression reads (string literals and functions left out)."""
    return set(_METRIC.findall(_STRING.sub('""', expr)))


# ---------------------------------------------------------------- PromQL sanity

def promql_problems(expr: str) -> list[str]:
    """What is wrong with ``expr`` by the module docstring's checks (empty: nothing)."""
    text = _STRING.sub('""', expr)
    problems = []
    stack: list[str] = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in ")]}":
            if not stack or "([{"[")]}".index(char)] != stack.pop():
                return [f"unbalanced {char!r}"]
    if stack:
        return [f"unclosed {stack[-1]!r}"]
    for call in re.finditer(r"\b(rate|irate|increase)\s*\(\s*([A-Za-z_:][\w:]*)?", text):
        name = call.group(2)
        if name is None or not name.endswith(_COUNTER_LIKE):
            problems.append(f"{call.group(1)}() over {name or 'an expression'}, not a counter or histogram series")
    bare = re.sub(r"\{[^{}]*\}", "{}", text)  # label matchers and label lists out: names only
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1()", bare)
    for token in re.finditer(r"(?<![\w:])([A-Za-z_:][\w:]*)\b(?!\s*\()", bare):
        name = token.group(1)
        rated = re.search(r"\b(rate|irate|increase)\s*\(\s*$", bare[:token.start()])
        if name.endswith(_COUNTER_LIKE) and rated is None:
            problems.append(f"{name} read raw (a counter needs rate() or increase())")
    for call in re.finditer(r"\bhistogram_quantile\s*\(", text):
        inner = _call_body(text, call.end() - 1)
        names = {m.group(1) for m in _SERIES.finditer(inner)}
        if not names or not all(name.endswith("_bucket") for name in names):
            problems.append(f"histogram_quantile() over {sorted(names)}, not _bucket series")
        for by in re.finditer(r"\bby\s*\(([^)]*)\)", inner):
            if "le" not in {label.strip() for label in by.group(1).split(",")}:
                problems.append(f"histogram_quantile() aggregates away le: by ({by.group(1)})")
        if re.search(r"\bwithout\s*\([^)]*\ble\b", inner):
            problems.append("histogram_quantile() aggregates away le (without le)")
    return problems


def _call_body(text: str, open_at: int) -> str:
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1:i]
    raise AssertionError(f"unclosed call at {open_at} in {text!r}")


def test_the_promql_checks_catch_what_they_claim() -> None:
    """The sanity checks accept good PromQL and name each kind of mistake."""
    good = ('histogram_quantile(0.99, sum by (job, le) (rate(rill_log_flush_seconds_bucket{job="rill"}[5m])))'
            ' > 0.5 and on (job) sum by (job) (increase(rill_requests_total{error!="NONE"}[5m])) > rill_connections')
    assert promql_problems(good) == []
    assert promql_problems("sum(rate(rill_requests_total[5m])") == ["unclosed '('"]
    assert promql_problems("rate(rill_log_size_bytes[5m])")[0].startswith("rate() over rill_log_size_bytes")
    raw = ["rill_requests_total read raw (a counter needs rate() or increase())"]
    assert promql_problems('rill_requests_total{type="FETCH"} > 0') == raw
    assert promql_problems("sum(rill_requests_total) > 0") == raw
    assert "aggregates away le" in promql_problems(
        "histogram_quantile(0.9, sum by (job) (rate(rill_log_flush_seconds_bucket[5m])))")[0]
    assert "not _bucket series" in promql_problems(
        "histogram_quantile(0.9, rate(rill_log_flush_seconds_count[5m]))")[0]
    assert metric_names('process_open_fds / process_max_fds and on (job) up{job="rill_x"} + rate(x[5m])') == {
        "process_open_fds", "process_max_fds", "up"}


# ---------------------------------------------------------------- the dashboard

def test_the_dashboard_is_a_current_grafana_dashboard_with_a_templated_datasource() -> None:
    """Current schema; a prometheus datasource variable used by every panel and target; job, instance, topic
    and group variables from label_values."""
    board = dashboard()
    assert board["schemaVersion"] >= 36 and board["title"] and board["uid"]
    variables = {var["name"]: var for var in board["templating"]["list"]}
    source = variables["DS_PROMETHEUS"]
    assert source["type"] == "datasource" and source["query"] == "prometheus"
    for name in ("job", "instance", "topic", "group"):
        assert variables[name]["type"] == "query", name
        assert variables[name]["datasource"] == DATASOURCE, name
        assert variables[name]["definition"].startswith("label_values("), name
    graphs = [panel for panel in panels(board) if panel["type"] != "row"]
    assert len(graphs) >= 30
    for panel in graphs:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == DATASOURCE, panel["title"]
        assert len({target["refId"] for target in panel["targets"]}) == len(panel["targets"]), panel["title"]


def test_the_dashboards_panels_have_unique_ids_and_do_not_overlap() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in panels(board):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_the_dashboards_rows_cover_what_an_operator_expects() -> None:
    rows = [panel["title"] for panel in dashboard()["panels"] if panel["type"] == "row"]
    for expected in ("Cluster overview", "Throughput", "Requests", "Storage", "Consumer groups", "Replication",
                     "gRPC", "Process"):
        assert any(title.startswith(expected) for title in rows), expected


def test_the_dashboards_queries_pass_the_promql_checks_and_use_defined_variables() -> None:
    board = dashboard()
    defined = {var["name"] for var in board["templating"]["list"]} | GRAFANA_BUILTINS
    for expr in panel_exprs(board) + variable_queries(board):
        if expr in panel_exprs(board):  # (label_values() may read a counter's labels)
            assert promql_problems(expr.replace("$__rate_interval", "5m")) == [], expr
        used = set(re.findall(r"\$\{?(\w+)", expr))
        assert used <= defined, f"{expr}: undefined {used - defined}"


# ---------------------------------------------------------------- the alert rules

def test_every_alert_rule_is_complete() -> None:
    """Each rule has alert, expr, for, labels.severity and annotations summary and description; the alerts
    operators expect are there, each once."""
    data = yaml.safe_load(ALERTS.read_text())
    assert [group["name"] for group in data["groups"]] and all(group["rules"] for group in data["groups"])
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    assert REQUIRED_ALERTS <= set(names), REQUIRED_ALERTS - set(names)
    for rule in rules:
        name = rule["alert"]
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, name
        assert re.fullmatch(r"\d+[smhdwy]", str(rule["for"])), name
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert rule["annotations"]["summary"].strip() and rule["annotations"]["description"].strip(), name


def test_the_alert_expressions_pass_the_promql_checks() -> None:
    for rule in alert_rules():
        assert "$" not in rule["expr"], f"{rule['alert']}: a Grafana variable in a Prometheus rule"
        assert promql_problems(rule["expr"]) == [], rule["alert"]


def test_the_alerts_use_the_documented_thresholds() -> None:
    """The thresholds docs/operations.md's table states are the ones in the rules."""
    rules = {rule["alert"]: " ".join(rule["expr"].split()) for rule in alert_rules()}
    assert rules["RillConsumerLagHigh"].endswith("(rill_group_lag_seconds) > 300")
    assert rules["RillDiskNearlyFull"] == "rill_log_dir_free_bytes / rill_log_dir_total_bytes < 0.1"
    assert "rill_log_flush_seconds_bucket[5m]" in rules["RillFsyncSlow"] and rules["RillFsyncSlow"].endswith("> 0.5")
    assert rules["RillBrokerDown"] == 'up{job="rill"} == 0'


# ---------------------------------------------------------------- against a live broker

def exposed_series(text: str) -> set[str]:
    """The series names a scrape offers, by family type (families without samples count): a counter's
    ``_total``, a histogram's ``_bucket``, ``_sum`` and ``_count``, a gauge's own name."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "summary": ("", "_sum", "_count"), "gaugehistogram": ("_bucket", "_gsum", "_gcount")}
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in suffixes.get(family.type, ("",))}


def test_every_metric_the_dashboard_and_alerts_query_is_exposed_by_a_broker(tmp_path: Path) -> None:
    """A broker that took produces, a fetch and a group's commit exposes every rill_ and process_ series the
    dashboard and the alert rules read."""
    with running_broker(tmp_path, num_partitions=2) as broker:
        with Producer(bootstrap_servers=broker.address, acks="append") as producer:
            for i in range(10):
                producer.send("monitored", f"m{i}".encode(), partition=i % 2).get(10)
        with SimpleConsumer(broker.host, broker.port) as client:
            committed = list(client.fetch("monitored", 0, 0, 1 << 20))[1].next_offset
        admin = AdminClient(broker.grpc_address)
        try:
            admin.create_group("watchers", ["monitored"])
            admin.commit("watchers", [("monitored", 0, committed)])
        finally:
            admin.close()
        text = broker_exposition(broker)
    exposed = exposed_series(text)
    assert 'rill_group_lag_seconds{group="watchers",partition="0",topic="monitored"}' in text
    queried = {name for expr in all_exprs() for name in metric_names(expr)} - {"up"}
    assert {name for name in queried if name.startswith("rill_")} and "process_open_fds" in queried
    assert queried - exposed == set()

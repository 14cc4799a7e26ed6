"""The console's pages and JSON against a real in-process broker, through Starlette's TestClient.

Every number on the pages is compared with what rill's own clients say (AdminClient,
SimpleConsumer): the truth the console must show. Topics and groups are named per test,
as the module shares one broker and one console (sampling every 0.3 s).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest

from rill.broker.testing import RunningBroker
from rill.client.admin import AdminClient
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from tests.console.console_support import TestClient, commit, committed, console_client, wait_until

pytestmark = pytest.mark.xdist_group("console-pages")  # one broker and one console for the module


@pytest.fixture(scope="module")
def client(module_broker: RunningBroker) -> Iterator[TestClient]:
    with console_client(module_broker.address) as c:
        yield c


def produce(broker: RunningBroker, topic: str, partition: int, values: list[bytes]) -> list[int]:
    """Append ``values`` to ``topic``-``partition``; the offset of each, then the end."""
    with SimpleProducer(broker.host, broker.port) as producer:
        ack = producer.send(topic, values, partition=partition)
    offsets = [ack.first_offset]
    for v in values:
        offsets.append(offsets[-1] + 10 + len(v))  # 4 length + 1 magic + 1 attributes + 4 CRC + payload
    assert offsets[-1] == ack.next_offset
    return offsets


def hidden_fields(page: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page)}


def test_the_brokers_page_names_the_broker_its_roles_and_its_groups(client: TestClient,
                                                                     module_broker: RunningBroker) -> None:
    """A single broker is the controller, leads every partition and coordinates every group."""
    produce(module_broker, "roles", 0, [b"x"])
    with AdminClient(module_broker.grpc_address) as admin:
        assert admin.create_group("roles-app", ["roles"]).error_code == pb.NONE
    data = client.get("/api/brokers").json()
    (broker,) = data["brokers"]
    assert (broker["broker_id"], broker["port"], broker["grpc_port"]) == (module_broker.broker_id, module_broker.port,
                                                                           module_broker.grpc_port)
    assert broker["alive"] and broker["controller"] and data["controller"] == module_broker.broker_id
    assert "roles-app" in broker["groups"] and broker["leaders"] >= 2 and data["offline_partitions"] == 0
    page = client.get("/")
    assert page.status_code == 200 and 'id="controller">broker' in page.text and "roles-app" in page.text


def test_topics_and_partitions_show_the_offsets_and_sizes_describe_topics_gives(client: TestClient,
                                                                                 module_broker: RunningBroker) -> None:
    """The list and the topic page carry DescribeTopics' numbers: start, end, size, leader, per partition."""
    ends = produce(module_broker, "sized", 1, [b"a" * 100, b"b" * 50])
    with AdminClient(module_broker.grpc_address) as admin:
        (truth,) = admin.describe_topics(["sized"]).topics
    listed = {t["name"]: t for t in client.get("/api/topics").json()}
    assert listed["sized"]["partitions"] == 2 and listed["sized"]["size_bytes"] == ends[-1]
    topic = client.get("/api/topics/sized").json()
    assert [(p["partition"], p["start_offset"], p["end_offset"], p["size_bytes"], p["leader"])
            for p in topic["partitions"]] == [(p.partition, p.start_offset, p.end_offset, p.size_bytes, p.leader)
                                              for p in truth.partitions]
    assert topic["partitions"][1]["end_offset"] == ends[-1] and not topic["replicated"]
    page = client.get("/topics/sized").text
    assert f'<td class="num end">{ends[-1]}</td>' in page and "/topics/sized/1/messages" in page
    assert '<a href="/topics/sized">sized</a>' in client.get("/topics").text


def test_the_append_rate_comes_from_the_end_offsets_the_console_samples(client: TestClient,
                                                                        module_broker: RunningBroker) -> None:
    """A partition written to between samples has a positive rate; an idle one has 0 B/s."""
    produce(module_broker, "rated", 0, [b"r"])

    def rates() -> dict[int, float | None]:
        return {p["partition"]: p["rate"] for p in client.get("/api/topics/rated").json()["partitions"]}

    def growing() -> dict[int, float | None] | None:
        now = rates()
        return now if (now[0] or 0) > 0 else None

    wait_until(lambda: None not in rates().values(), what="two samples of each partition")
    produce(module_broker, "rated", 0, [b"r" * 1000])
    assert wait_until(growing, what="a positive rate")[1] == 0.0
    assert "0 B/s" in client.get("/topics/rated").text


def test_the_message_browser_shows_values_escaped_as_text_json_or_hex(client: TestClient,
                                                                     module_broker: RunningBroker) -> None:
    """Messages from the start, from an offset, the last N: values HTML-escaped, JSON pretty, hex dumped."""
    values = [b'{"user": 42}', b"<script>alert('x')</script>", b"\x00\xffbytes"]
    offsets = produce(module_broker, "browsed", 0, values)
    page = client.get("/topics/browsed/0/messages?from=earliest&format=text").text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page and "<script>alert" not in page
    data = client.get("/api/topics/browsed/0/messages?from=earliest&format=json").json()
    assert [m["offset"] for m in data["messages"]] == offsets[:-1] and data["log_end"] == offsets[-1]
    assert json.loads(data["messages"][0]["shown"]) == {"user": 42} and "\n  " in data["messages"][0]["shown"]
    assert data["messages"][1]["note"] == "not JSON: shown as text"
    hexed = client.get(f"/api/topics/browsed/0/messages?from=offset&offset={offsets[2]}&format=hex").json()
    assert [m["shown"] for m in hexed["messages"]] == ["00000000  00 ff 62 79 74 65 73" + " " * 28 + "  |..bytes|"]
    last_two = client.get("/api/topics/browsed/0/messages?from=latest&count=2").json()
    assert [m["offset"] for m in last_two["messages"]] == offsets[1:3] and last_two["next_offset"] == offsets[-1]
    old = client.get("/api/topics/browsed/0/messages?from=time&time=2000-01-01T00:00:00Z").json()
    assert old["first_offset"] == 0 and old["messages"][0]["appended_ms"] > 0


def test_the_message_browser_says_plainly_what_cannot_be_read(client: TestClient, module_broker: RunningBroker) -> None:
    """An offset inside a message, a missing partition or topic, a bad time: one sentence, no traceback."""
    produce(module_broker, "plain", 0, [b"hello"])
    for url, status, says in (("/topics/plain/0/messages?from=offset&offset=3", 400, "not where a message"),
                              ("/topics/plain/9/messages", 404, "has no partition 9"),
                              ("/topics/absent/0/messages", 404, "does not exist"),
                              ("/topics/plain/0/messages?from=time&time=yesterday", 400, "not a date and time"),
                              ("/topics/plain/0/messages?count=100000", 400, "count must be between")):
        response = client.get(url)
        assert response.status_code == status and says in response.text, url
        assert "Traceback" not in response.text
    assert client.get("/api/topics/absent").json() == {
        "error": {"kind": "not-found", "message": "topic 'absent' does not exist"}}


def test_a_groups_lag_is_the_coordinators_and_its_history_is_sampled(client: TestClient,
                                                                     module_broker: RunningBroker) -> None:
    """Committed offsets, ends and lag per partition equal DescribeGroup's; the sampler's history follows the lag."""
    ends = produce(module_broker, "lagging", 0, [b"m" * 20] * 3)
    with AdminClient(module_broker.grpc_address) as admin:
        assert admin.create_group("lagger", ["lagging"]).error_code == pb.NONE
    commit(module_broker.grpc_address, "lagger", {("lagging", 0): ends[1]})
    data = client.get("/api/groups/lagger").json()
    with AdminClient(module_broker.grpc_address) as admin:
        truth = admin.describe_group("lagger")
    assert [(p["topic"], p["partition"], p["committed_offset"], p["end_offset"], p["lag_bytes"]) for p in
            data["partitions"]] == [(p.topic, p.partition, p.committed_offset, p.end_offset, p.lag_bytes)
                                    for p in truth.partitions]
    assert data["lag"]["lag_bytes"] == ends[-1] - ends[1] and data["state"] == "Empty"
    history = wait_until(lambda: [h for h in client.get("/api/groups/lagger").json()["history"]
                                  if h[1]["lag_bytes"] == ends[-1] - ends[1]], what="a sample of the lag")
    assert history[-1][1]["lag_seconds"] >= 0
    listed = {g["name"]: g for g in client.get("/api/groups").json()}
    assert listed["lagger"]["lag"]["lag_bytes"] == ends[-1] - ends[1]
    page = client.get("/groups/lagger?part=live").text
    assert 'id="lag-bytes-chart"' in page and 'data-points="0"' not in page.split('id="lag-seconds-chart"')[0]
    assert not page.lstrip().startswith("<!doctype")  # the live part alone, for the page's refresh


def test_a_rewind_moves_nothing_until_its_plan_is_confirmed(client: TestClient, module_broker: RunningBroker) -> None:
    """The plan is the CLI's dry run; confirming moves exactly it; the JSON of the group then shows the new offsets."""
    ends = produce(module_broker, "rewound", 0, [b"a", b"b", b"c"])
    commit(module_broker.grpc_address, "rewinder", {("rewound", 0): ends[-1]})
    plan = client.post("/groups/rewinder/rewind", data={"topic": "rewound", "partitions": "0", "target": "offset",
                                                        "value": str(ends[1])})
    assert plan.status_code == 200 and "Nothing has moved yet" in plan.text
    assert f'<td class="num new">{ends[1]}</td>' in plan.text
    assert committed(module_broker.grpc_address, "rewinder") == {("rewound", 0): ends[-1]}
    done = client.post("/groups/rewinder/rewind/confirm", data=hidden_fields(plan.text))
    assert done.status_code == 200 and "Moved 1 offset(s) of group rewinder." in done.text
    assert committed(module_broker.grpc_address, "rewinder") == {("rewound", 0): ends[1]}
    refused = client.post("/groups/rewinder/rewind", data={"topic": "rewound", "target": "offset", "value": "1"})
    assert refused.status_code == 400 and "INVALID_OFFSET" in refused.text and "confirm-form" not in refused.text


def test_an_edited_or_stale_confirmation_moves_nothing(client: TestClient, module_broker: RunningBroker) -> None:
    """Edited offsets are refused; a plan that changed since (a member committed) is shown again, unmoved."""
    ends = produce(module_broker, "guarded", 0, [b"1", b"2", b"3", b"4"])
    commit(module_broker.grpc_address, "guard", {("guarded", 0): ends[3]})
    plan = client.post("/groups/guard/rewind", data={"topic": "guarded", "partitions": "0", "target": "shift",
                                                     "value": "-1"})
    fields = hidden_fields(plan.text)
    assert plan.status_code == 200, plan.text
    assert json.loads(fields["offsets"]) == [["guarded", 0, ends[2]]]
    forged = client.post("/groups/guard/rewind/confirm", data={**fields, "offsets": json.dumps([["guarded", 0, 0]])})
    assert forged.status_code == 400 and "not issued by this console" in forged.text
    commit(module_broker.grpc_address, "guard", {("guarded", 0): ends[1]})  # the group moved on meanwhile
    stale = client.post("/groups/guard/rewind/confirm", data=fields)
    assert stale.status_code == 409 and "The plan changed" in stale.text
    assert committed(module_broker.grpc_address, "guard") == {("guarded", 0): ends[1]}
    again = client.post("/groups/guard/rewind/confirm", data=hidden_fields(stale.text))
    assert again.status_code == 200
    assert committed(module_broker.grpc_address, "guard") == {("guarded", 0): ends[0]}


def test_a_confirmed_latest_moves_to_the_end_that_was_shown(client: TestClient, module_broker: RunningBroker) -> None:
    """The log growing between the plan and the confirmation does not refuse a rewind to the latest offset, and
    the offset moved to is the end the plan showed, not the later one."""
    ends = produce(module_broker, "growing", 0, [b"a"])
    commit(module_broker.grpc_address, "grower", {("growing", 0): 0})
    plan = client.post("/groups/grower/rewind", data={"topic": "growing", "partitions": "0", "target": "latest"})
    later = produce(module_broker, "growing", 0, [b"b"])
    done = client.post("/groups/grower/rewind/confirm", data=hidden_fields(plan.text))
    assert done.status_code == 200, done.text
    assert committed(module_broker.grpc_address, "grower") == {("growing", 0): ends[-1]} != {("growing", 0): later[-1]}


def test_unknown_groups_foreign_hosts_and_broken_requests_get_a_sentence(client: TestClient) -> None:
    """A group that does not exist is 404 on the page and in JSON; a Host that is not the console's is refused
    (DNS rebinding); every page sends the Content-Security-Policy."""
    page = client.get("/groups/nobody")
    assert page.status_code == 404 and "group &#39;nobody&#39; does not exist" in page.text
    assert client.get("/api/groups/nobody").json()["error"]["kind"] == "not-found"
    assert client.post("/groups/nobody/rewind", data={"target": "latest"}).status_code == 404
    assert client.get("/topics", headers={"host": "attacker.example"}).status_code == 400
    assert "script-src 'self'" in client.get("/topics").headers["content-security-policy"]
    assert client.get("/static/console.js").status_code == 200

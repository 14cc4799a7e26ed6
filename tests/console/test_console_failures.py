"""The console when things go wrong: its broker stops (and comes back), and a principal the ACLs restrict.

Each failure must be one plain sentence on the page (and an error object in JSON) with
a status saying what kind it is, never a traceback, and the console must keep serving.
"""

from __future__ import annotations

from pathlib import Path

from rill.broker.testing import running_broker
from rill.client.security.acls import Operation, ResourceType
from rill.client.simple import SimpleProducer
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb
from tests.console.console_support import console_client, wait_until
from tests.security.grpc_acls import ADMIN, BOB, PASSWORDS, allow, secured_broker

O, R = Operation, ResourceType


def test_a_stopped_broker_is_reported_plainly_and_the_pages_recover_when_it_returns(tmp_path: Path) -> None:
    """With the only broker stopped, every page says it is unreachable (503, no traceback) and the sampler
    records the failure; started again on the same ports, the pages answer again."""
    with running_broker(tmp_path / "data") as b:
        ports = {"port": b.port, "grpc_port": b.grpc_port}
        with SimpleProducer(b.host, b.port) as producer:
            producer.send("kept", [b"survives"], partition=0)
        with console_client(b.address) as client:
            assert client.get("/api/topics").status_code == 200
            b.close()
            for url in ("/", "/topics", "/topics/kept", "/groups", "/topics/kept/0/messages"):
                page = client.get(url)
                assert page.status_code == 503 and "Broker unreachable" in page.text, url
                assert "Traceback" not in page.text
            assert client.get("/api/topics").json()["error"]["kind"] == "unreachable"
            sampler = client.app.state.console.sampler  # type: ignore[attr-defined]
            rounds = sampler.status().rounds
            wait_until(lambda: sampler.status().rounds > rounds + 1 and sampler.status().errors,
                       what="a failed sampling round")
            assert "Broker unreachable" in client.get("/topics?part=live").text
            with running_broker(tmp_path / "data", **ports):
                wait_until(lambda: client.get("/api/topics").status_code == 200, what="the pages to answer again")
                assert "survives" in client.get("/topics/kept/0/messages?from=earliest").text


def test_the_console_shows_only_what_its_principal_may_see(tmp_path: Path) -> None:
    """As bob over SASL (``--command-config``), allowed to describe and read one topic and one group: the
    lists leave the others out, naming them is refused plainly, and his rewind is refused (no Alter)."""
    (tmp_path / "data").mkdir()
    with secured_broker(tmp_path / "data", super_users=ADMIN) as s:
        for topic in ("visible", "hidden"):
            assert s.call("admin", "Admin", "CreateTopic", apb.CreateTopicRequest(topic=topic, partitions=1)
                          ).error_code == pb.NONE
        for group, topic in (("seen-app", "visible"), ("unseen-app", "hidden")):
            assert s.call("admin", "GroupCoordinator", "CommitOffsets", pb.CommitOffsetsRequest(
                consumer_group=group, offsets=[pb.PartitionOffset(topic=topic, partition=0, offset=0)])
            ).error_code == pb.NONE
        s.acls.set(allow(BOB, O.READ, R.TOPIC, "visible"), allow(BOB, O.DESCRIBE, R.GROUP, "seen-app"))
        config = tmp_path / "bob.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                          f"sasl.plain.username=bob\nsasl.plain.password={PASSWORDS['bob']}\n")
        sasl = f"127.0.0.1:{s.broker.listener_port('SASL_PLAINTEXT')}"
        with console_client(sasl, "--command-config", str(config)) as client:
            assert [t["name"] for t in client.get("/api/topics").json()] == ["visible"]
            assert [g["name"] for g in client.get("/api/groups").json()] == ["seen-app"]
            refused = client.get("/topics/hidden")
            assert refused.status_code == 403 and "Not authorized" in refused.text and "hidden" in refused.text
            assert client.get("/api/groups/unseen-app").json()["error"]["kind"] == "refused"
            assert client.get("/api/groups/seen-app").json()["partitions"][0]["topic"] == "visible"
            assert client.get("/topics/visible/0/messages?from=earliest").status_code == 200
            rewind = client.post("/groups/seen-app/rewind", data={"target": "earliest"})
            assert rewind.status_code == 403 and "may not Alter Group:seen-app" in rewind.text
            brokers = client.get("/api/brokers").json()
            assert brokers["controller"] is None and "Not authorized" in brokers["controller_note"]
            assert brokers["brokers"][0]["alive"]

"""The console against a cluster: two in-process brokers on a real ZooKeeper, then one of them stopped.

Asked through one broker's data port, the console lists both brokers with their roles,
a replicated topic's replicas and ISR, and a group whose coordinator is the other
broker (its lag as that coordinator reports it); when that broker stops, the open topic
page shows the ISR shrink without a reload, and the brokers page says the broker is down.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from rill.client.admin import AdminClient
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from tests.console.console_support import commit, screenshot_path, served_console, wait_until
from tests.zookeeper.test_broker_registration import zk_broker
from tests.zookeeper.test_group_log import coordinator_of

WAIT_MS = 30_000  # a stop moves leaderships and groups: generous under a loaded CI machine


@pytest.mark.slow
def test_a_cluster_and_a_broker_that_stops(tmp_path: Path, zk_connect: str, browser: Any) -> None:
    """Both brokers, the replicas and a group coordinated by broker 2 are shown through broker 1; broker 2
    stopping shrinks the ISR on the open page and is named down on the brokers page."""
    with ExitStack() as stack:
        b1, b2 = (stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=i, offsets_topic_replication_factor=2,
                                                zookeeper_session_timeout_ms=4000))
                  for i in (1, 2))
        for b in (b1, b2):
            placement = b.broker.coordination.placement
            assert placement is not None
            wait_until(placement.serving_all, timeout=20, what="the groups topic led and loaded")
        with AdminClient(b1.grpc_address) as admin:
            assert admin.create_topic("replicated", 2, 2).error_code == pb.NONE
            wait_until(lambda: all(p.leader > 0 for t in admin.describe_topics(["replicated"]).topics
                                   for p in t.partitions), timeout=20, what="leaders of both partitions")
        with SimpleProducer(*_leader_address(b1, "replicated", 0)) as producer:
            end = producer.send("replicated", [b"one", b"two"], partition=_broker_number(b1, "replicated", 0)
                                ).next_offset
        group = next(f"app-{n}" for n in range(100) if coordinator_of(b1, f"app-{n}") == 2)
        commit(b2.grpc_address, group, {("replicated", 0): 0})

        with served_console(b1.address) as console:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            page.goto(console.url)
            expect(page.locator("#brokers tbody tr")).to_have_count(2)
            expect(page.locator('#brokers tr[data-broker="2"] td.groups')).to_contain_text(group)
            controller = page.inner_text("#controller")
            assert controller in ("broker 1", "broker 2")
            page.goto(console.url + "topics/replicated")
            expect(page.locator('#partitions tr[data-partition="0"] td').nth(2)).to_have_text(re.compile(r"^(1,2|2,1)$"))
            expect(page.locator('#partitions tr[data-partition="0"] td.end')).to_have_text(str(end))
            page.goto(console.url + f"groups/{group}")
            expect(page.locator('#group-partitions tr[data-partition="replicated-0"] td.lag')).to_have_text(str(end))
            expect(page.locator("#lag-bytes-chart")).to_have_attribute("data-last", str(end))
            page.screenshot(path=screenshot_path("cluster-group"), full_page=True)

            page.goto(console.url + "topics/replicated")
            b2.close()  # a clean stop: its leaderships and groups move to broker 1
            isr = page.locator('#partitions tr[data-partition="0"] td').nth(3)
            expect(isr).to_contain_text("under-replicated")  # the page refreshed by itself
            expect(isr).to_contain_text("1")
            page.screenshot(path=screenshot_path("cluster-topic"), full_page=True)
            page.goto(console.url)
            expect(page.locator('#brokers tr[data-broker="2"] td.status')).to_have_text("down")
            expect(page.locator(".problem-down")).to_contain_text("Broker 2 (127.0.0.1:")
            page.screenshot(path=screenshot_path("cluster-broker-down"), full_page=True)
            page.close()


def _leader_address(b: Any, topic: str, partition: int) -> tuple[str, int]:
    with AdminClient(b.grpc_address) as admin:
        (t,) = admin.describe_topics([topic]).topics
        leader = t.partitions[partition].leader
        brokers = {x.broker_id: x for x in admin.describe_cluster().brokers}
    return brokers[leader].host, brokers[leader].port


def _broker_number(b: Any, topic: str, partition: int) -> int:
    with AdminClient(b.grpc_address) as admin:
        (t,) = admin.describe_topics([topic]).topics
        return int(t.partitions[partition].broker_partition)

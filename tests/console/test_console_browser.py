"""The console in a real headless browser (Debian's Chromium through Playwright) against a real broker.

What an operator does: the topics page lists the topics created, the message browser
shows a produced message, a group's lag chart draws and moves when messages are
produced, and a rewind through the form moves the group's offsets only once the plan is
confirmed. The pages refresh by themselves (every 0.3 s here); each page is saved as a
screenshot under test-artifacts/console/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from rill.broker.testing import RunningBroker
from rill.client.admin import AdminClient
from rill.client.console import ConsoleServer
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from tests.console.console_support import commit, committed, screenshot_path, served_console

pytestmark = pytest.mark.xdist_group("console-browser")  # one broker, one console, one browser for the module

WAIT_MS = 15_000


@pytest.fixture(scope="module")
def console(module_broker: RunningBroker) -> Iterator[ConsoleServer]:
    with served_console(module_broker.address) as server:
        yield server


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    tab: Page = browser.new_page(viewport={"width": 1280, "height": 900})
    tab.set_default_timeout(WAIT_MS)
    yield tab
    tab.close()


def produce(broker: RunningBroker, topic: str, values: list[bytes], partition: int = 0) -> int:
    """Append ``values``; the partition's end afterwards."""
    with SimpleProducer(broker.host, broker.port) as producer:
        return producer.send(topic, values, partition=partition).next_offset


def test_the_brokers_and_topics_pages_list_what_the_cluster_has(page: Page, console: ConsoleServer,
                                                                module_broker: RunningBroker) -> None:
    """The broker is listed as controller; created topics are listed, with their partitions, and a topic's end
    offset on its page follows new messages without a reload."""
    with AdminClient(module_broker.grpc_address) as admin:
        assert admin.create_topic("ui-empty", 3, 1).error_code == pb.NONE
    produce(module_broker, "ui-orders", [b"first"])
    page.goto(console.url)
    expect(page.locator("#controller")).to_have_text(f"broker {module_broker.broker_id}")
    expect(page.locator(f'#brokers tr[data-broker="{module_broker.broker_id}"] td.status')).to_have_text("up")
    page.screenshot(path=screenshot_path("brokers"), full_page=True)
    page.click("text=Topics")
    expect(page.locator('#topics tr[data-topic="ui-orders"]')).to_be_visible()
    expect(page.locator('#topics tr[data-topic="ui-empty"] td').nth(1)).to_have_text("3")
    page.screenshot(path=screenshot_path("topics"), full_page=True)
    page.click('#topics a:text-is("ui-orders")')
    expect(page.locator("#partitions tbody tr")).to_have_count(2)
    end = produce(module_broker, "ui-orders", [b"second", b"third"])
    expect(page.locator('#partitions tr[data-partition="0"] td.end')).to_have_text(str(end))  # refreshed by itself
    page.screenshot(path=screenshot_path("topic"), full_page=True)


def test_the_message_browser_shows_a_produced_message(page: Page, console: ConsoleServer,
                                                      module_broker: RunningBroker) -> None:
    """A JSON message is shown pretty-printed, its markup as text (escaped), at the offset it was written to."""
    produce(module_broker, "ui-messages", [b"before"])
    value = b'{"order": 7, "item": "<b>tea</b>"}'
    with SimpleProducer(module_broker.host, module_broker.port) as producer:
        offset = producer.send("ui-messages", [value], partition=0).first_offset
    page.goto(console.url + "topics/ui-messages/0/messages")
    page.select_option("#from", "earliest")
    page.select_option("#format", "json")
    page.click("#browse button[type=submit]")
    row = page.locator(f'#messages tr[data-offset="{offset}"]')
    expect(row.locator("pre.value")).to_have_text('{\n  "order": 7,\n  "item": "<b>tea</b>"\n}')
    assert page.locator("#messages b").count() == 0  # the markup in the value is text, not HTML
    expect(page.locator("#messages tbody tr")).to_have_count(2)
    page.screenshot(path=screenshot_path("messages"), full_page=True)


def test_a_groups_lag_chart_draws_and_moves_when_messages_are_produced(page: Page, console: ConsoleServer,
                                                                      module_broker: RunningBroker) -> None:
    """The chart of a group that reads nothing grows a vertex per sample, and its last value follows the lag
    the coordinator reports after more messages arrive."""
    end = produce(module_broker, "ui-lag", [b"x" * 100])
    with AdminClient(module_broker.grpc_address) as admin:
        assert admin.create_group("ui-lagging", ["ui-lag"]).error_code == pb.NONE
    commit(module_broker.grpc_address, "ui-lagging", {("ui-lag", 0): 0})
    page.goto(console.url + "groups/ui-lagging")
    chart = page.locator("#lag-bytes-chart")
    expect(chart).to_have_attribute("data-last", str(end))
    page.wait_for_function("() => Number(document.querySelector('#lag-bytes-chart').dataset.points) >= 2",
                           timeout=WAIT_MS)
    before = page.get_attribute("#lag-bytes-chart-line", "d")
    assert before and before.startswith("M") and " L" in before
    more = produce(module_broker, "ui-lag", [b"y" * 300] * 3)
    expect(chart).to_have_attribute("data-last", str(more))
    expect(page.locator('#group-partitions tr[data-partition="ui-lag-0"] td.lag')).to_have_text(str(more))
    after = page.get_attribute("#lag-bytes-chart-line", "d")
    assert after != before and after is not None and after.count("L") >= before.count("L")
    page.screenshot(path=screenshot_path("group"), full_page=True)


def test_a_rewind_through_the_form_moves_the_offsets_only_after_confirmation(page: Page, console: ConsoleServer,
                                                                             module_broker: RunningBroker) -> None:
    """Show the plan: nothing moves; confirm it: the committed offset is the planned one."""
    end = produce(module_broker, "ui-rewind", [b"a", b"b", b"c"])
    commit(module_broker.grpc_address, "ui-rewinder", {("ui-rewind", 0): end})
    page.goto(console.url + "groups/ui-rewinder")
    page.select_option("#rewind-topic", "ui-rewind")
    page.fill("#rewind-partitions", "0")
    page.check("#target-earliest")
    page.click("#rewind-plan")
    expect(page.locator('#plan tr[data-partition="ui-rewind-0"] td.new')).to_have_text("0")
    assert committed(module_broker.grpc_address, "ui-rewinder") == {("ui-rewind", 0): end}
    page.screenshot(path=screenshot_path("rewind-plan"), full_page=True)
    page.click("#confirm")
    expect(page.locator("#moved-summary")).to_have_text("Moved 1 offset(s) of group ui-rewinder.")
    assert committed(module_broker.grpc_address, "ui-rewinder") == {("ui-rewind", 0): 0}
    page.screenshot(path=screenshot_path("rewind-done"), full_page=True)
    page.click("#back")
    expect(page.locator('#group-partitions tr[data-partition="ui-rewind-0"] td.committed')).to_have_text("0")

"""Fixtures of the console tests: one broker per module, one headless Chromium per module.

Chromium is Debian's (``/usr/bin/chromium``, installed by .ci/setup), started by
Playwright with ``executable_path``: nothing downloads a browser.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rill.broker.testing import RunningBroker, running_broker

CHROMIUM = "/usr/bin/chromium"
EXPECT_TIMEOUT_MS = 15_000  # Playwright's expect() waits at most this long (its default, 5 s, is short on a busy CI)


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """One in-process broker for a module's tests (2 partitions per topic, index entries every 64 bytes)."""
    with running_broker(tmp_path_factory.mktemp("console-broker"), num_partitions=2,
                        log_index_interval_bytes=64) as b:
        yield b


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Chromium for a module's tests (Debian's, through Playwright)."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()

"""Loading groups from their log logs one summary, not a group.created line per group."""

from __future__ import annotations

import structlog

from rill.coordinator.records import GroupCreated
from tests.unit.coordinator.harness import Harness


def created(name: str) -> GroupCreated:
    return GroupCreated(name, 10_000, 10_000, (), "range", False)


def test_groups_replayed_at_load_are_logged_at_debug_and_new_ones_at_info() -> None:
    h = Harness()
    with structlog.testing.capture_logs() as logs:
        for i in range(100):
            h.coord.replay(created(f"old-{i}"), loading=True)
        h.coord.replay(created("new"))
    levels = [(e["group"], e["log_level"]) for e in logs if e["event"] == "group.created"]
    assert levels.count(("new", "info")) == 1
    assert all(level == "debug" for group, level in levels if group != "new") and len(levels) == 101
    assert len(h.coord.group_names()) == 101

"""Every consumer setting is in docs/clients.md's consumer section, with its name as Kafka spells it."""

from __future__ import annotations

from pathlib import Path

from rill.client.consumer.settings import SETTINGS


def test_every_consumer_setting_is_documented() -> None:
    """The consumer's settings table (docs/clients.md, "## Consumer") names each key."""
    doc = (Path(__file__).parents[3] / "docs" / "clients.md").read_text()
    section = doc[doc.index("## Consumer"):doc.index("## kafka-python equivalents")]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    missing = [s.name for s in SETTINGS if not any(f"`{s.name}`" in line.split("|")[1] for line in table)]
    assert not missing

"""A deleted topic's committed offsets go from every group served here, through a persisted record."""

from __future__ import annotations

from rill.coordinator import records
from rill.coordinator.deleted_topics import forget_deleted_topics
from rill.coordinator.records import OffsetsCommitted, OffsetsDeleted
from rill.client.structs import TopicPartition
from tests.unit.coordinator.harness import Harness


def test_offsets_of_deleted_topics_are_forgotten_and_the_rest_kept() -> None:
    h = Harness(topics={"t": 2, "u": 1})
    for group in ("a", "b", "c"):
        h.create(group, topics=("t", "u"))
    h.persist([OffsetsCommitted("a", (("t", 0, 0), ("t", 1, 0), ("u", 0, 0))), OffsetsCommitted("b", (("u", 0, 0),)),
               OffsetsCommitted("c", (("t", 1, 0),))])
    h.records.clear()
    cleaned = forget_deleted_topics(h.coord, h.persist, lambda name: name != "c", ["t"])
    assert cleaned == ["a"]  # b has no offsets of t; c is coordinated elsewhere
    assert h.records == [OffsetsDeleted("a", ("t",))]
    assert h.coord.offsets_of_topics(["t", "u"]) == {"a": ("u",), "b": ("u",), "c": ("t",)}
    assert dict(h.coord._groups["a"].offsets) == {TopicPartition("u", 0): 0}


def test_the_record_round_trips_and_replays_idempotently() -> None:
    record = OffsetsDeleted("a", ("t", "v"))
    assert records.decode(records.encode(record)) == record
    h = Harness()
    h.create("a")
    h.persist([OffsetsCommitted("a", (("t", 0, 0),)), record, record])
    assert not h.coord._groups["a"].offsets

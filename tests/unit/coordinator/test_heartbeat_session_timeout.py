"""The Heartbeat carries no session timeout (its field 2 is reserved): a member's is set when it registers."""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import Harness


def test_the_field_is_gone_and_its_number_and_name_are_reserved() -> None:
    """HeartbeatRequest has no session_timeout; number 2 and the name stay reserved so neither is reused."""
    assert "session_timeout" not in pb.HeartbeatRequest.DESCRIPTOR.fields_by_name
    message = descriptor_pb2.DescriptorProto()
    pb.HeartbeatRequest.DESCRIPTOR.CopyToProto(message)
    assert [(r.start, r.end) for r in message.reserved_range] == [(2, 3)]
    assert list(message.reserved_name) == ["session_timeout"]


def test_an_old_clients_heartbeat_with_the_field_is_still_answered(h: Harness) -> None:
    """Bytes from a client that still sends field 2 parse (it is skipped) and keep the member alive."""
    member = h.join(session_timeout=6_000)
    old = pb.HeartbeatRequest(consumer_group="g", consumer_id=member.consumer_id,
                              generation=member.generation).SerializeToString() + bytes([2 << 3, 0xE0, 0xD4, 0x03])
    request = pb.HeartbeatRequest.FromString(old)  # field 2, varint 60000
    h.clock.advance(5)
    assert h.call(h.coord.heartbeat, request).error_code == pb.NONE
    h.clock.advance(5)
    assert h.state() == "Stable"


def test_the_session_timeout_is_the_registered_one(h: Harness) -> None:
    """A member registered with 6 s is removed 6 s after its last heartbeat, whatever its heartbeats carried."""
    member = h.join(session_timeout=6_000)
    old = pb.HeartbeatRequest(consumer_group="g", consumer_id=member.consumer_id,
                              generation=member.generation).SerializeToString() + bytes([2 << 3, 0xE0, 0xD4, 0x03])
    assert h.call(h.coord.heartbeat, pb.HeartbeatRequest.FromString(old)).error_code == pb.NONE
    h.clock.advance(6.1)
    assert h.heartbeat(member) == pb.UNKNOWN_MEMBER

"""The fetch responses' parts: headers as bytes, message data left to the transport (sendfile)."""

from __future__ import annotations

from dataclasses import dataclass

from rill.client.protocol.fetch_response import (decode_multifetch_response, fetch_response_parts,
                                                 multifetch_response_parts)


@dataclass(frozen=True)
class Placeholder:
    data: bytes

    @property
    def length(self) -> int:
        return len(self.data)


def wire(parts: list[bytes | Placeholder]) -> bytes:
    """What the transport sends: bytes as they are, placeholders as their data."""
    return b"".join(p if isinstance(p, bytes) else p.data for p in parts)


def test_a_fetch_response_keeps_its_data_as_a_placeholder() -> None:
    """The data is not copied into the response: it stays one placeholder after the header."""
    data = Placeholder(b"x" * 10)
    parts = fetch_response_parts(0, data)
    assert parts[1] is data and wire(parts) == b"\x00\x00\x00\x0c\x00\x00" + b"x" * 10


def test_an_empty_or_failed_fetch_is_a_header_alone() -> None:
    """No data part for an empty slice or for an error (None)."""
    assert fetch_response_parts(0, Placeholder(b"")) == [b"\x00\x00\x00\x02\x00\x00"]
    assert fetch_response_parts(1, None) == [b"\x00\x00\x00\x02\x00\x01"]


def test_a_multifetch_response_decodes_to_its_blocks() -> None:
    """Encoded with placeholders and sent, a MULTIFETCH response decodes to each block's error and data."""
    blocks = [(0, Placeholder(b"abc")), (3, None), (0, Placeholder(b"")), (0, Placeholder(b"defgh"))]
    frame = wire(multifetch_response_parts(blocks))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    error, decoded = decode_multifetch_response(frame[4:])
    assert error == 0
    assert [(e, bytes(d)) for e, d in decoded] == [(0, b"abc"), (3, b""), (0, b""), (0, b"defgh")]

"""FETCH, MULTIFETCH and FETCH_WAIT responses, both ways (sans-IO).

The broker encodes a fetch response as a list of *parts*: ``bytes`` for headers and
placeholders for message data, objects with a ``length`` (the broker's file slices)
that the transport sends with ``os.sendfile`` straight from the segment file, in the
manner of h11's sendfile placeholders. The client decodes the bytes it received.

Wire format (Kafka 0.7)::

    FETCH response          = SIZE int32, ERROR int16, message set bytes
    MULTIFETCH response     = SIZE int32, ERROR int16, block*
    block                   = SIZE int32, ERROR int16, message set bytes

FETCH_WAIT (rill) answers with a MULTIFETCH response. A block's SIZE counts its error
code and its data, so an empty block is 6 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from rill.client.protocol.framing import INT16, INT32, DecodeError, Reader

__all__ = ["SendfilePart", "decode_fetch_response", "decode_multifetch_response", "fetch_response_parts",
           "multifetch_response_parts", "response_header"]


class SendfilePart(Protocol):
    """A placeholder for ``length`` bytes the transport sends from a file (a broker file slice)."""

    @property
    def length(self) -> int: ...


S = TypeVar("S", bound=SendfilePart)


def response_header(error: int, body_size: int) -> bytes:
    """The 6-byte response header for a body of ``body_size`` bytes after the error code."""
    return INT32.pack(2 + body_size) + INT16.pack(error)


def fetch_response_parts(error: int, data: S | None) -> list[bytes | S]:
    """A whole FETCH response, also one MULTIFETCH block: its header, then ``data`` if it is not empty."""
    size = data.length if data is not None else 0
    header = response_header(error, size)
    return [header, data] if data is not None and size else [header]


def multifetch_response_parts(blocks: Sequence[tuple[int, S | None]]) -> list[bytes | S]:
    """A MULTIFETCH (or FETCH_WAIT) response: one block per ``(error, data)``, in request order."""
    parts: list[bytes | S] = []
    total = 0
    for error, data in blocks:
        parts.extend(fetch_response_parts(error, data))
        total += 6 + (data.length if data is not None else 0)
    return [response_header(0, total), *parts]


def decode_fetch_response(body: memoryview | bytes) -> tuple[int, memoryview]:
    """A FETCH response body (after SIZE): (error, message bytes)."""
    r = Reader(body)
    error = r.int16()
    return error, r.raw(r.remaining())


def decode_multifetch_response(body: memoryview | bytes) -> tuple[int, list[tuple[int, memoryview]]]:
    """A MULTIFETCH / FETCH_WAIT response body (after SIZE): (error, [(error, message bytes), ...]).

    Raises:
        DecodeError: a block's size is below 2 or runs past the body.
    """
    r = Reader(body)
    error = r.int16()
    blocks = []
    while r.remaining():
        size = r.int32()
        if size < 2:
            raise DecodeError(f"fetch block of size {size}")
        block_error = r.int16()
        blocks.append((block_error, r.raw(size - 2)))
    return error, blocks

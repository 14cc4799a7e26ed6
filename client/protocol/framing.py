"""Size-prefixed frames and a bounds-checked reader for their bodies.

Every request and response is ``size int32`` followed by ``size`` bytes. The
:class:`FrameDecoder` is a two-state machine (reading the size, reading the body)
that checks the size against a maximum *before* buffering the body, so a hostile
length never makes the peer allocate it. :class:`Reader` walks a body and raises
:class:`DecodeError` instead of reading past the end, so every count and string
length inside a request is checked against the bytes that remain.
"""

from __future__ import annotations

import struct

from rill.client.errors import RillError

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


class DecodeError(RillError):
    """A frame or body that does not follow the wire format."""


class FrameTooLarge(DecodeError):
    """A frame whose size field is over the limit (or not positive)."""


class FrameDecoder:
    """Turn a byte stream into frame bodies.

    Not thread-safe. ``feed(data)`` buffers bytes; ``next_frame()`` returns the next
    complete body (without its size field) or ``None``. Raises :class:`FrameTooLarge`
    as soon as a size field is read that is <= 0 or > ``max_frame_size``.
    """

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._need: int | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def pending_bytes(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> memoryview | None:
        buf = self._buf
        if self._need is None:
            if len(buf) - self._pos < 4:
                self._compact()
                return None
            (size,) = INT32.unpack_from(buf, self._pos)
            if size <= 0 or size > self.max_frame_size:
                raise FrameTooLarge(f"frame size {size} outside 1..{self.max_frame_size}")
            self._pos += 4
            self._need = size
        if len(buf) - self._pos < self._need:
            self._compact()
            return None
        start = self._pos
        self._pos += self._need
        self._need = None
        return memoryview(bytes(buf[start:self._pos]))

    def _compact(self) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0


class Reader:
    """A cursor over a frame body; every read is checked against the bytes left."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf)

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int) -> int:
        if n < 0 or self.end - self.pos < n:
            raise DecodeError(f"needs {n} bytes at position {self.pos}, {self.end - self.pos} left")
        start = self.pos
        self.pos += n
        return start

    def int16(self) -> int:
        return int(INT16.unpack_from(self.buf, self._take(2))[0])

    def int32(self) -> int:
        return int(INT32.unpack_from(self.buf, self._take(4))[0])

    def int64(self) -> int:
        return int(INT64.unpack_from(self.buf, self._take(8))[0])

    def raw(self, n: int) -> memoryview:
        start = self._take(n)
        return self.buf[start:start + n]

    def string16(self) -> str:
        """An int16 length, then that many bytes (decoded as latin-1 so nothing fails here)."""
        n = self.int16()
        return bytes(self.raw(n)).decode("latin-1")

    def count(self, min_element_size: int) -> int:
        """An int16 element count, checked against the bytes left before any allocation."""
        n = self.int16()
        if n < 0 or n * min_element_size > self.remaining():
            raise DecodeError(f"count {n} of elements of at least {min_element_size} bytes "
                              f"does not fit in the {self.remaining()} bytes left")
        return n

    def expect_end(self) -> None:
        if self.pos != self.end:
            raise DecodeError(f"{self.end - self.pos} unexpected bytes after the request")


def string16(value: str) -> bytes:
    raw = value.encode("latin-1")
    return INT16.pack(len(raw)) + raw

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
from collections.abc import Callable

from rill.client.errors import RillError

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


class DecodeError(RillError):
    """A frame or body that does not follow the wire format."""


class FrameTooLarge(DecodeError):
    """A frame whose size field is over the limit (or not positive); ``size`` is that field."""

    def __init__(self, message: str, size: int = 0) -> None:
        super().__init__(message)
        self.size = size

    def looks_like_tls(self) -> bool:
        """Whether the "size" is a TLS record's first bytes (0x16 0x03: a TLS client's hello on a
        listener without TLS)."""
        return self.size >> 16 == 0x1603


RESERVED_BODY_BYTES = 64 * 1024
"""Bodies larger than this ask ``reserve`` for their size before they are buffered."""
DIRECT_BODY_BYTES = 1024 * 1024
"""Bodies larger than this get a buffer of their own (received straight into it, never copied twice)."""


class FrameDecoder:
    """Turn a byte stream into frame bodies.

    Not thread-safe. ``feed(data)`` buffers bytes; ``next_frame()`` returns the next
    complete body (without its size field) or ``None``. Raises :class:`FrameTooLarge`
    as soon as a size field is read that is below ``min_frame_size`` (1: frames are never
    empty) or above ``max_frame_size``.

    Memory: bodies are cut from one small buffer, which is dropped whenever it
    empties, so an idle decoder holds a few dozen bytes. A body larger than
    ``direct_bytes`` gets a buffer of exactly its size instead, which the caller may
    fill straight from the socket (:meth:`body_target`, :meth:`commit`); the frame is
    then handed out without a copy. Before buffering a body larger than
    ``reserved_bytes`` the decoder asks ``reserve(size)``; when it says no,
    :meth:`next_frame` returns ``None`` and :attr:`waiting_for_memory` holds the size
    until a later call is granted it. The caller gives reserved bytes back
    (:meth:`take_reservation` after each frame, :meth:`release_all` when the
    connection goes).
    """

    def __init__(self, max_frame_size: int, *, direct_bytes: int = DIRECT_BODY_BYTES,
                 reserved_bytes: int = RESERVED_BODY_BYTES, reserve: Callable[[int], bool] | None = None,
                 min_frame_size: int = 1) -> None:
        self.max_frame_size = max_frame_size
        self.min_frame_size = min_frame_size
        self.direct_bytes = direct_bytes
        self.reserved_bytes = reserved_bytes
        self._reserve = reserve
        self._buf = bytearray()
        self._pos = 0
        self._need: int | None = None
        self._body: bytearray | None = None
        self._filled = 0
        self._reserved = 0  # bytes reserved for the body being received into a buffer of its own
        self._gathering = 0  # bytes reserved for the body being gathered in the small buffer
        self._delivered = 0  # bytes reserved for the frame last returned
        self.waiting_for_memory = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos >= len(self._buf):  # all handed out: start afresh (nothing to keep or move)
            self._buf = bytearray(data)
            self._pos = 0
        else:
            self._buf += data

    def pending_bytes(self) -> int:
        """Bytes received and not yet handed out as a frame."""
        return len(self._buf) - self._pos + self._filled

    def in_frame(self) -> bool:
        """Whether part of a frame was received (its size field at least) and it is not yet handed out."""
        return self._need is not None or self._pos < len(self._buf)

    def receiving_body(self) -> bool:
        """Whether a body holding reserved memory is being received (its size arrived, more bytes are due)."""
        return self._body is not None or self._gathering > 0

    def body_target(self) -> memoryview | None:
        """Where to receive the rest of a large body directly, or None (then :meth:`feed`)."""
        if self._body is None or self._pos < len(self._buf):
            return None
        return memoryview(self._body)[self._filled:]

    def commit(self, count: int) -> None:
        """``count`` bytes were written into :meth:`body_target`."""
        self._filled += count

    def start_direct_body(self) -> None:
        """Start the next frame's own buffer now if exactly its size field has arrived and it is large.

        Then :meth:`body_target` offers the whole body, which the caller receives straight
        from the socket: no byte of it passes through the small buffer. Only for a decoder
        without a memory budget (``reserve``), such as a client's; otherwise nothing happens.
        """
        if self._body is not None or self._need is not None or self._reserve is not None:
            return
        if len(self._buf) - self._pos != 4:
            return
        (size,) = INT32.unpack_from(self._buf, self._pos)
        if self.direct_bytes < size <= self.max_frame_size:
            self._pos += 4
            self._need = size
            self._start_body(size)

    def next_frame(self) -> memoryview | None:
        if self._body is not None:
            return self._continue_body()
        buf = self._buf
        if self._need is None:
            if len(buf) - self._pos < 4:
                self._compact()
                return None
            (size,) = INT32.unpack_from(buf, self._pos)
            if size < self.min_frame_size or size > self.max_frame_size:
                raise FrameTooLarge(f"frame size {size} outside {self.min_frame_size}..{self.max_frame_size}", size)
            self._pos += 4
            self._need = size
        need = self._need
        if need > self.reserved_bytes and not self._gathering:
            if self._reserve is not None and not self._reserve(need):
                self.waiting_for_memory = need
                return None
            self.waiting_for_memory = 0
            self._gathering = need  # reserved once, whatever the calls until it is whole
        whole = len(buf) - self._pos >= need
        if not whole:
            if need > self.direct_bytes:  # a buffer of its own, filled straight from the socket
                return self._start_body(need)
            self._compact()
            return None
        self._delivered, self._gathering = self._gathering, 0
        start = self._pos
        self._pos += need
        self._need = None
        return memoryview(bytes(buf[start:self._pos]))

    def _start_body(self, size: int) -> memoryview | None:
        self._reserved, self._gathering = self._gathering, 0
        self._body = bytearray(size)
        self._filled = 0
        return self._continue_body()

    def _continue_body(self) -> memoryview | None:
        body = self._body
        assert body is not None
        available = len(self._buf) - self._pos
        if available and self._filled < len(body):
            take = min(available, len(body) - self._filled)
            body[self._filled:self._filled + take] = memoryview(self._buf)[self._pos:self._pos + take]
            self._filled += take
            self._pos += take
        self._compact()
        if self._filled < len(body):
            return None
        self._body, self._filled, self._need = None, 0, None
        self._delivered, self._reserved = self._reserved, 0
        return memoryview(body)

    def take_reservation(self) -> int:
        """The bytes reserved for the frame last returned (0 for a small one); counted once."""
        taken, self._delivered = self._delivered, 0
        return taken

    def release_all(self) -> int:
        """Drop what is buffered; return the reserved bytes held (for a connection that goes away)."""
        held = self._reserved + self._delivered + self._gathering
        self._reserved = self._delivered = self._gathering = 0
        self._body, self._buf, self._pos, self._need, self._filled = None, bytearray(), 0, None, 0
        self.waiting_for_memory = 0
        return held

    def _compact(self) -> None:
        if self._pos:
            if self._pos >= len(self._buf):
                self._buf = bytearray()  # give the memory back, not just the bytes
            else:
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

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        """The fixed-size integer fields of ``layout`` at the cursor."""
        return tuple(layout.unpack_from(self.buf, self._take(layout.size)))

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

"""Messages and message sets (Kafka 0.7 format, seed 000 section 5.4).

On the wire and on disk a message is::

    length      int32   bytes after this field
    magic       int8    0 or 1
    attributes  int8    only when magic is 1; low 2 bits: codec (0 none, 1 gzip, 2 snappy)
    crc         uint32  CRC32 of the payload
    payload     bytes   length - 5 (magic 0) or length - 6 (magic 1)

A message set is messages back to back. A compressed message's payload is itself a
message set. Offsets are byte positions in a partition: the message at offset ``o``
is followed by the one at ``o + 4 + length``.

Validation (:func:`scan`), decoding (:func:`decode_message_set`) and encoding
(:func:`encode_set`) run in a C accelerator when it is built and in Python otherwise;
the two agree byte for byte (tests/unit/test_codec.py, tests/unit/producer/test_encode_set.py).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterable
from typing import NamedTuple

from rill.client.crc import crc32
from rill.client.errors import CorruptMessageError

MAGIC_V0 = 0
MAGIC_V1 = 1
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_MASK = 0x03

LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_V0_HEADER = struct.Struct(">iBI")  # length, magic, crc
_V1_HEADER = struct.Struct(">iBBI")  # length, magic, attributes, crc
MIN_MESSAGE_SIZE = 5  # magic + crc: the smallest legal value of the length field
DEFAULT_MAX_MESSAGE_SIZE = 1_000_000 + 6  # message.max.bytes of payload plus the v1 header
MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024  # refuse gzip bombs beyond this
MAX_COMPRESSION_DEPTH = 8  # compressed messages nested deeper than this are refused


class Message(NamedTuple):
    """One message as a consumer sees it.

    ``offset`` is the byte position of the message in its partition and
    ``next_offset`` where the next one starts (what a consumer commits). The messages
    inside a compressed wrapper share the wrapper's ``offset``; all but the last have
    ``next_offset == offset`` so that resuming from any of them re-reads the whole
    wrapper (at-least-once), and the last has the wrapper's end.
    ``key`` is ``None`` for the 0.7 format, which carries no key.
    """

    topic: str
    partition: int
    offset: int
    next_offset: int
    value: bytes
    key: bytes | None = None


# Scan outcomes (ScanResult.error): 0 means the buffer is whole messages, possibly
# followed by an incomplete tail (valid_bytes < len(buffer)).
SCAN_OK = 0
SCAN_BAD_CRC = 1
SCAN_BAD_LENGTH = 2  # length field below the minimum for its magic
SCAN_TOO_LARGE = 3  # length field over max_message_size
SCAN_BAD_MAGIC = 4
SCAN_BAD_CODEC = 5

SCAN_ERROR_NAMES = {
    SCAN_OK: "ok",
    SCAN_BAD_CRC: "CRC mismatch",
    SCAN_BAD_LENGTH: "length below the message header size",
    SCAN_TOO_LARGE: "length over the maximum message size",
    SCAN_BAD_MAGIC: "unknown magic byte",
    SCAN_BAD_CODEC: "unknown compression codec",
}


class ScanResult(NamedTuple):
    """What :func:`scan` found.

    ``message_count`` whole valid messages span ``valid_bytes`` from the start. ``error`` is
    ``SCAN_OK`` or the reason the message at ``valid_bytes`` is invalid. ``marks``
    lists the positions of message boundaries chosen for a sparse index (see
    :func:`scan`), in increasing order.
    """

    message_count: int
    valid_bytes: int
    error: int
    marks: list[int]


_INCOMPLETE = -1


def _py_check_one(mv: memoryview, pos: int, max_message_size: int) -> tuple[int, int, int, int]:
    """Check the message at ``pos`` (the Python twin of check_one in _speedups.c).

    Returns (status, stop, header, codec): SCAN_OK with ``stop`` the end of a whole
    valid message, or with ``stop == _INCOMPLETE`` when it does not fit in ``mv``, or
    a SCAN_* error. The length is checked before anything after it is read.
    """
    end = len(mv)
    if end - pos < 4:
        return SCAN_OK, _INCOMPLETE, 0, 0
    (size,) = LENGTH.unpack_from(mv, pos)
    if size < MIN_MESSAGE_SIZE:
        return SCAN_BAD_LENGTH, 0, 0, 0
    if size > max_message_size:
        return SCAN_TOO_LARGE, 0, 0, 0
    stop = pos + 4 + size
    if stop > end:
        return SCAN_OK, _INCOMPLETE, 0, 0
    magic = mv[pos + 4]
    if magic == MAGIC_V1:
        if size < MIN_MESSAGE_SIZE + 1:
            return SCAN_BAD_LENGTH, 0, 0, 0
        codec, header = mv[pos + 5] & CODEC_MASK, 10
        if codec == 3:
            return SCAN_BAD_CODEC, 0, 0, 0
    elif magic == MAGIC_V0:
        codec, header = CODEC_NONE, 9
    else:
        return SCAN_BAD_MAGIC, 0, 0, 0
    (crc,) = _CRC.unpack_from(mv, pos + header - 4)
    if crc32(mv[pos + header:stop]) != crc:
        return SCAN_BAD_CRC, 0, 0, 0
    return SCAN_OK, stop, header, codec


def _py_scan(buf: bytes | bytearray | memoryview, max_message_size: int,
             index_interval: int = 0, next_mark: int = -1) -> ScanResult:
    mv = memoryview(buf)
    pos = count = 0
    marks: list[int] = []
    while True:
        status, stop, _, _ = _py_check_one(mv, pos, max_message_size)
        if status != SCAN_OK or stop == _INCOMPLETE:
            return ScanResult(count, pos, status, marks)
        if 0 <= next_mark <= pos:
            marks.append(pos)
            next_mark = pos + index_interval
        pos = stop
        count += 1


def _py_find_valid(buf: bytes | bytearray | memoryview, start: int, max_message_size: int) -> int:
    """Return the first position >= start where a whole valid message begins, or -1."""
    mv = memoryview(buf)
    for pos in range(max(start, 0), len(mv) - 3):
        status, stop, _, _ = _py_check_one(mv, pos, max_message_size)
        if status == SCAN_OK and stop != _INCOMPLETE:
            return pos
    return -1


def _py_decode(buf: bytes | bytearray | memoryview, topic: str, partition: int,
               base_offset: int, cls: type) -> tuple[list[Message], int, int]:
    """Decode whole messages; stop at the first incomplete, invalid or compressed one.

    Returns (messages, consumed, status) where status is SCAN_OK (stopped at the end or
    an incomplete tail), -1 (a compressed message starts at ``consumed``) or a SCAN_*
    error for the message at ``consumed``.
    """
    mv = memoryview(buf)
    pos = 0
    out: list[Message] = []
    while True:
        status, stop, header, codec = _py_check_one(mv, pos, 0x7FFFFFFF)
        if status != SCAN_OK or stop == _INCOMPLETE:
            return out, pos, status
        if codec != CODEC_NONE:
            return out, pos, -1
        out.append(cls(topic, partition, base_offset + pos, base_offset + stop, bytes(mv[pos + header:stop])))
        pos = stop


try:  # the C accelerator, when built
    from rill.client import _speedups  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised when the extension is not built
    _speedups = None

ACCELERATED = _speedups is not None


def scan(buf: bytes | bytearray | memoryview, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
         index_interval: int = 0, next_mark: int = -1) -> ScanResult:
    """Validate a message set without copying it: lengths first, then magic, codec, CRC.

    Each length is checked against ``max_message_size`` and the bytes that remain
    before anything is read past it, so a garbage length never causes a large read or
    allocation. Scanning stops at the first invalid message (``error`` says why) or at
    an incomplete tail (``error`` is ``SCAN_OK`` and ``valid_bytes < len(buf)``).

    ``marks``: when ``next_mark >= 0``, the first message boundary at or after
    ``next_mark`` is recorded, then the first at or after that plus
    ``index_interval``, and so on (positions relative to ``buf``). Compressed messages
    are checked only as wrappers (their CRC covers the compressed bytes).
    """
    if _speedups is not None:
        return ScanResult(*_speedups.scan(buf, max_message_size, index_interval, next_mark))
    return _py_scan(buf, max_message_size, index_interval, next_mark)


def find_valid(buf: bytes | bytearray | memoryview, start: int,
               max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> int:
    """Return the first position >= ``start`` where a whole valid message begins, or -1.

    Used by recovery to tell a torn tail (nothing valid follows) from corruption in
    the middle of a log (valid messages follow the bad one).
    """
    if _speedups is not None:
        return int(_speedups.find_valid(buf, start, max_message_size))
    return _py_find_valid(buf, start, max_message_size)


def decode_message_set(buf: bytes | bytearray | memoryview, topic: str = "", partition: int = 0,
                       base_offset: int = 0) -> tuple[list[Message], int]:
    """Decode the whole messages in ``buf``, expanding compressed ones.

    Returns ``(messages, consumed)``: ``consumed`` bytes from the start were whole
    messages; the rest is an incomplete tail (a fetch ends wherever its size limit
    falls). Raises :class:`CorruptMessageError` for a message that fails its CRC or
    framing check, so a corrupt message is never delivered.
    """
    return _decode_set(buf, topic, partition, base_offset, 0)


def _decode_set(buf: bytes | bytearray | memoryview, topic: str, partition: int,
                base_offset: int, depth: int) -> tuple[list[Message], int]:
    mv = memoryview(buf)
    messages: list[Message] = []
    pos = 0
    decode = _speedups.decode if _speedups is not None else _py_decode
    while True:
        batch, consumed, status = decode(mv[pos:], topic, partition, base_offset + pos, Message)
        messages.extend(batch)
        pos += consumed
        if status == SCAN_OK:
            return messages, pos
        if status != -1:
            raise CorruptMessageError(
                f"{topic}-{partition}: message at offset {base_offset + pos}: {SCAN_ERROR_NAMES[status]}")
        size = LENGTH.unpack_from(mv, pos)[0]
        messages.extend(_decode_compressed(mv[pos:pos + 4 + size], topic, partition, base_offset + pos, depth + 1))
        pos += 4 + size


def _decode_compressed(message: memoryview, topic: str, partition: int, offset: int,
                       depth: int) -> list[Message]:
    codec = message[5] & CODEC_MASK
    end = offset + len(message)
    if codec != CODEC_GZIP:
        raise CorruptMessageError(
            f"{topic}-{partition}: message at offset {offset}: compression codec {codec} is not supported")
    if depth > MAX_COMPRESSION_DEPTH:
        raise CorruptMessageError(
            f"{topic}-{partition}: message at offset {offset}: compressed messages nested more than "
            f"{MAX_COMPRESSION_DEPTH} deep")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing
    try:
        inner = inflater.decompress(message[10:], MAX_DECOMPRESSED_SIZE + 1)
    except zlib.error as exc:
        raise CorruptMessageError(f"{topic}-{partition}: message at offset {offset}: bad gzip data") from exc
    if not inflater.eof and len(inner) <= MAX_DECOMPRESSED_SIZE:
        raise CorruptMessageError(f"{topic}-{partition}: message at offset {offset}: truncated gzip data")
    if len(inner) > MAX_DECOMPRESSED_SIZE:
        raise CorruptMessageError(
            f"{topic}-{partition}: message at offset {offset}: decompresses to more than {MAX_DECOMPRESSED_SIZE} bytes")
    values, consumed = _decode_set(inner, topic, partition, 0, depth)
    if consumed != len(inner):
        raise CorruptMessageError(f"{topic}-{partition}: message at offset {offset}: truncated compressed set")
    last = len(values) - 1
    return [Message(topic, partition, offset, end if i == last else offset, m.value, m.key)
            for i, m in enumerate(values)]


def encode_message(payload: bytes, magic: int = MAGIC_V1, attributes: int = 0) -> bytes:
    """Encode one message (length field included)."""
    payload = bytes(payload)
    if magic == MAGIC_V1:
        return _V1_HEADER.pack(6 + len(payload), MAGIC_V1, attributes, crc32(payload)) + payload
    if magic == MAGIC_V0:
        if attributes:
            raise ValueError("magic 0 messages have no attributes")
        return _V0_HEADER.pack(5 + len(payload), MAGIC_V0, crc32(payload)) + payload
    raise ValueError(f"unknown magic {magic}")


def _py_encode_set(payloads: Iterable[bytes | bytearray | memoryview], magic: int) -> bytes:
    """Reference for the C ``encode_set``: payloads (bytes-like) as uncompressed messages."""
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"unknown magic {magic}")
    return b"".join([encode_message(bytes(memoryview(p)), magic) for p in payloads])


def encode_set(payloads: Iterable[bytes | bytearray | memoryview], magic: int = MAGIC_V1) -> bytes:
    """Encode payloads as an uncompressed message set (in C when the accelerator is built).

    Raises:
        TypeError: a payload is not bytes-like. ValueError: an unknown magic.
    """
    if _speedups is not None:
        return bytes(_speedups.encode_set(payloads, magic))
    return _py_encode_set(payloads, magic)


def encode_message_set(payloads: Iterable[bytes], codec: int = CODEC_NONE, magic: int = MAGIC_V1) -> bytes:
    """Encode payloads as a message set; with ``codec=CODEC_GZIP`` as one compressed message."""
    plain = encode_set(payloads, magic)
    if codec == CODEC_NONE:
        return plain
    if codec == CODEC_GZIP:
        return encode_message(gzip.compress(plain, compresslevel=6, mtime=0), MAGIC_V1, CODEC_GZIP)
    raise ValueError(f"cannot write compression codec {codec}")

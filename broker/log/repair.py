"""Repairing the corrupt ranges ``--verify-logs`` found: cut the log there, or quarantine the range.

Both keep every removed byte in a side file (``<segment>.log.corrupt-<ms>``, fsynced),
as recovery does, and both run on a stopped broker (the caller holds the data
directory's lock).

* **cut** (``--repair cut``): the partition ends at its first corrupt byte. The rest
  of that segment and every later segment go to side files. Offsets after the cut
  are reused by new messages, so consumers that had read past it must be reset.
* **quarantine** (``--repair quarantine``): the corrupt range is copied aside and
  overwritten, in place, by *filler*: valid messages that decode to nothing, so every
  offset stays where it was and consumers (rill's and other Kafka 0.7 clients) read
  past it as if the range held no messages. A filler is a gzip-compressed message
  whose payload is an empty message set, padded to its exact length with a gzip
  comment; it is at most ``FILLER_BYTES`` long, so a long range gets several. A range
  shorter than 31 bytes cannot hold that wrapper and is filled with one uncompressed
  message of zero bytes instead (consumers see one message with a zeroed value); one
  shorter than 9 bytes cannot hold any message: cut that partition instead. A torn
  tail (nothing valid follows) is simply cut.

The segment's index is removed (rebuilt from the data when next used), and the
recovery-point checkpoint is lowered to the new end of a cut log.

Thread-safety: runs alone, on the calling thread.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any

import structlog

from rill.broker.log import checkpoint, files
from rill.broker.log.log_config import LogConfig
from rill.broker.log.recovery import cut_log
from rill.broker.log.verify import Finding
from rill.client.protocol.messages import CODEC_GZIP, MAGIC_V0, MAGIC_V1, encode_message

FILLER_BYTES = 64 * 1024
GZIP_FILLER_MIN = 31  # message header (10) + the smallest gzip member (21)
MESSAGE_MIN = 9  # a magic-0 message with an empty payload
_GZIP_HEADER = bytes([0x1F, 0x8B, 8, 0x10, 0, 0, 0, 0, 0, 0xFF])  # deflate, FCOMMENT set, no mtime
_EMPTY_DEFLATE = b"\x03\x00"
_logger = structlog.get_logger(__name__)


class RepairError(Exception):
    """A range that this mode cannot repair (the message says what to do instead)."""


def filler(length: int) -> bytes:
    """Valid messages, exactly ``length`` bytes long, that decode to no message (see the module docstring).

    Raises:
        RepairError: ``length`` < 9 (no message fits).
    """
    if length < MESSAGE_MIN:
        raise RepairError(f"a range of {length} bytes cannot hold a message; cut the partition instead")
    if length < GZIP_FILLER_MIN:
        return encode_message(bytes(length - MESSAGE_MIN), MAGIC_V0)
    out = []
    remaining = length
    while remaining:
        size = min(remaining, FILLER_BYTES)
        if 0 < remaining - size < GZIP_FILLER_MIN:
            size = remaining - GZIP_FILLER_MIN
        out.append(_empty_gzip_message(size))
        remaining -= size
    return b"".join(out)


def _empty_gzip_message(size: int) -> bytes:
    comment = (b"rill quarantine " * (size // 16 + 1))[:size - GZIP_FILLER_MIN]
    member = _GZIP_HEADER + comment + b"\x00" + _EMPTY_DEFLATE + struct.pack("<II", 0, 0)
    message = encode_message(member, MAGIC_V1, CODEC_GZIP)
    assert len(message) == size
    return message


def quarantine(finding: Finding, config: LogConfig, now_ms: int | None = None) -> str:
    """Copy the range aside and overwrite it with filler (a torn tail is cut); return the side file.

    Raises:
        RepairError: the range is too short for filler.
        OSError: a file could not be read, written or synced.
    """
    if not finding.valid_after:
        return cut(finding, config, now_ms)
    corrupt = finding.corrupt
    replacement = filler(corrupt.length)
    stamp = now_ms if now_ms is not None else int(time.time() * 1000)
    fd = os.open(corrupt.path, os.O_RDWR | os.O_CLOEXEC)
    try:
        original = os.pread(fd, corrupt.length, corrupt.start)
        side, out = files.create_side_file(corrupt.path, stamp)
        try:
            files.pwrite_all(out, original, 0, side)
            os.fsync(out)
        finally:
            os.close(out)
        files.fsync_dir(os.path.dirname(corrupt.path))
        files.pwrite_all(fd, replacement, corrupt.start, corrupt.path)
        os.fsync(fd)
    finally:
        os.close(fd)
    _drop_index(corrupt.path, corrupt.base_offset)
    _logger.warning("repair.quarantined", file=corrupt.path, position=corrupt.start, offset=corrupt.offset,
                    bytes=corrupt.length, side_file=side)
    return side


def cut(finding: Finding, config: LogConfig, now_ms: int | None = None) -> str:
    """End the partition at the range's first byte (the rest to side files); return the first side file."""
    corrupt = finding.corrupt
    stamp = now_ms if now_ms is not None else int(time.time() * 1000)
    logger: Any = _logger.bind(directory=finding.directory)
    sides = cut_log(finding.directory, corrupt.base_offset, corrupt.start, f"cut by repair: {corrupt.reason}",
                    config, logger, stamp)
    _drop_index(corrupt.path, corrupt.base_offset)
    _lower_recovery_point(finding.directory, corrupt.offset)
    return sides[0] if sides else ""


def _drop_index(segment_path: str, base_offset: int) -> None:
    index = files.index_path(os.path.dirname(segment_path), base_offset)
    try:
        os.unlink(index)
    except FileNotFoundError:
        return
    files.fsync_dir(os.path.dirname(segment_path))


def _lower_recovery_point(directory: str, end: int) -> None:
    """Keep the checkpoint's recovery point of this partition at or below its new end."""
    data_dir = os.path.dirname(directory)
    parsed = files.parse_partition_dir_name(os.path.basename(directory))
    points = checkpoint.read_checkpoint(data_dir)
    if parsed is None or points is None or points.get(parsed, 0) <= end:
        return
    points[parsed] = end
    checkpoint.write_checkpoint(data_dir, points)

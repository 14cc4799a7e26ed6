"""CRC32 of message payloads (the IEEE polynomial Kafka 0.7 uses).

``crc32`` is zlib's implementation. crcmod's predefined ``crc-32`` computes the same
values (the tests check this on random data) but is 4x slower on 200-byte payloads
and 12x slower on 10 KB ones, which made it the bottleneck of both the produce and
the fetch path (see docs/benchmarks.md, "CRC-32: crcmod vs zlib").
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from zlib import crc32

__all__ = ["crc32", "crcmod_crc32"]


@cache
def _crcmod_function() -> Callable[[bytes], int]:
    import crcmod.predefined

    return crcmod.predefined.mkCrcFun("crc-32")  # type: ignore[no-any-return]


def crcmod_crc32(data: bytes) -> int:
    """crcmod's CRC-32 of ``data``: the reference the tests compare ``crc32`` against."""
    return int(_crcmod_function()(data))

"""``rill perf crc``: crcmod's CRC-32 against zlib's, on 200 B and 10 KB payloads."""

from __future__ import annotations

import argparse
import random
import timeit
import zlib
from collections.abc import Callable

from rill.client.cli.common import CliError, positive_float
from rill.client.cli.perf.report import MB, report


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``crc`` to ``rill perf``'s subcommands."""
    crc = kinds.add_parser("crc", help="crcmod vs zlib CRC-32 throughput")
    crc.add_argument("--seconds", type=positive_float, default=0.3,
                     help="minimum time per measurement; the best of 3 is kept (default: 0.3)")
    crc.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    crc.set_defaults(run=run_crc)


def throughput(func: Callable[[bytes], int], data: bytes, seconds: float) -> float:
    """Bytes per second of ``func(data)``: the best of 3 runs of at least ``seconds`` each."""
    timer = timeit.Timer("f(d)", globals={"f": func, "d": data})
    number = 1
    while True:  # calibrate like timeit.autorange, to the requested time
        elapsed = timer.timeit(number)
        if elapsed >= seconds:
            break
        number = max(number * 2, int(number * seconds / max(elapsed, 1e-9) * 1.1))
    best = min([elapsed, *timer.repeat(repeat=2, number=number)])
    return len(data) * number / best


def crcmod_function() -> tuple[Callable[[bytes], int], bool]:
    """crcmod's CRC-32 function (what rill.client.crc.crcmod_crc32 calls), built once,
    and whether crcmod's C extension is in use."""
    import importlib

    import crcmod.predefined

    func = crcmod.predefined.mkCrcFun("crc-32")
    return func, bool(getattr(importlib.import_module("crcmod.crcmod"), "_usingExtension", False))


def run_crc(args: argparse.Namespace) -> int:
    crcmod_crc, extension = crcmod_function()
    rng = random.Random(3)
    cases = []
    lines = [f"rill perf crc: CRC-32 throughput, best of 3 runs of >= {args.seconds} s "
             f"(crcmod C extension: {'yes' if extension else 'no'})"]
    for size in (200, 10 * 1024):
        data = rng.randbytes(size)
        if crcmod_crc(data) != zlib.crc32(data):
            raise CliError("crcmod and zlib disagree")  # pragma: no cover - the tests check this too
        crcmod_rate = throughput(crcmod_crc, data, args.seconds)
        zlib_rate = throughput(zlib.crc32, data, args.seconds)
        cases.append({"size": size, "crcmod_mb_per_s": crcmod_rate / MB, "zlib_mb_per_s": zlib_rate / MB,
                      "ratio": zlib_rate / crcmod_rate})
        lines.append(f"  {size:>6} B: crcmod {crcmod_rate / MB:9.1f} MB/s ({crcmod_rate / size:12,.0f} calls/s)   "
                     f"zlib {zlib_rate / MB:9.1f} MB/s ({zlib_rate / size:12,.0f} calls/s)   "
                     f"zlib/crcmod {zlib_rate / crcmod_rate:.1f}x")
    report(args, {"benchmark": "crc", "crcmod_extension": extension, "cases": cases}, lines)
    return 0


__all__ = ["add_parsers", "crcmod_function", "run_crc", "throughput"]

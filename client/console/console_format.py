"""How the console writes numbers and times: the Jinja filters of its templates. Pure functions.

Unknown values (None, and the -1 that rill's RPCs send for "unknown") are written ``-``.
"""

from __future__ import annotations

import time

__all__ = ["FILTERS", "human_bytes", "human_rate", "human_seconds", "local_time", "offset_text"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(value: float | None) -> str:
    """``1536`` -> ``1.5 KiB``; ``-`` for None or a negative (unknown) value."""
    if value is None or value < 0:
        return "-"
    amount = float(value)
    for unit in _UNITS:
        if amount < 1024 or unit == _UNITS[-1]:
            return f"{int(amount)} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def human_rate(value: float | None) -> str:
    """Bytes per second: ``2048.0`` -> ``2.0 KiB/s``; ``-`` while unknown."""
    if value is None:
        return "-"
    return "0 B/s" if value <= 0 else f"{human_bytes(value) if value >= 1 else f'{value:.2f} B'}/s"


def human_seconds(value: float | None) -> str:
    """``0.4`` -> ``0.4 s``, ``75`` -> ``1m 15s``, ``7300`` -> ``2h 1m``; ``-`` for None or negative."""
    if value is None or value < 0:
        return "-"
    if value < 60:
        return f"{value:.1f} s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60}s"
    if whole < 86400:
        return f"{whole // 3600}h {whole % 3600 // 60}m"
    return f"{whole // 86400}d {whole % 86400 // 3600}h"


def offset_text(value: int | None) -> str:
    """An offset, or ``-`` for None and -1 (none committed, or unknown)."""
    return "-" if value is None or value < 0 else str(value)


def local_time(epoch_seconds: float | None) -> str:
    """``2026-05-01 09:30:12`` in the console's local time; ``-`` for None or 0."""
    if not epoch_seconds:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch_seconds))


FILTERS = {"bytes": human_bytes, "rate": human_rate, "seconds": human_seconds, "offset": offset_text,
           "local_time": local_time}
"""The filters as the templates name them (``{{ size | bytes }}``)."""

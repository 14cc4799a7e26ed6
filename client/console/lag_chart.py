"""A lag chart as inline SVG: the geometry of one line over the sampling window. Pure functions.

The x axis is time, the console's whole window (``now - window`` at the left, ``now`` at
the right); the y axis goes from 0 at the bottom to :func:`nice_top` of the largest
value. Each sample is a vertex of one ``<path>``; a sample whose value is unknown
(None) breaks the line, the next known one starting a new stroke (``M``). The template
(group.html) draws the grid, the labels and the path; no script is involved, so the
chart is there as soon as the HTML is, and it moves each time the page's live part is
fetched again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Chart", "WIDTH", "HEIGHT", "line_chart", "nice_top", "span_text"]

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 72, 12, 12, 24  # margins: the value labels sit left of the plot, the times below


@dataclass(frozen=True)
class Chart:
    """What the template draws: the path (``d``), the last vertex, the labels, and figures tests read.

    ``points`` is how many samples have a known value; ``last`` is the newest known value
    (None: none yet); ``top`` the value at the top of the plot.
    """

    path: str
    points: int
    last: float | None
    last_xy: tuple[float, float] | None
    top: float
    top_label: str
    middle_label: str
    span_label: str
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    top_edge: int = TOP
    bottom_edge: int = HEIGHT - BOTTOM
    middle_y: float = TOP + (HEIGHT - BOTTOM - TOP) / 2


def nice_top(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten that is at least ``value`` (1 for 0 or less)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def line_chart(samples: Sequence[tuple[float, float | None]], now: float, window: float,
               label: Callable[[float], str]) -> Chart:
    """The chart of ``samples`` ((time, value or None), oldest first) over ``[now - window, now]``.

    ``label`` writes a value for the axis (bytes, seconds). Samples older than the
    window are left out; a time after ``now`` is drawn at the right edge.
    """
    start = now - window
    shown = [(t, v) for t, v in samples if t >= start]
    known = [v for _, v in shown if v is not None]
    top = nice_top(max(known, default=0.0))
    plot_w, plot_h = WIDTH - RIGHT - LEFT, HEIGHT - BOTTOM - TOP
    parts: list[str] = []
    pen_down = False
    last_xy: tuple[float, float] | None = None
    for t, v in shown:
        if v is None:
            pen_down = False
            continue
        x = LEFT + min(max((t - start) / window, 0.0), 1.0) * plot_w
        y = TOP + plot_h - (v / top) * plot_h
        parts.append(f"{'L' if pen_down else 'M'}{x:.1f},{y:.1f}")
        pen_down = True
        last_xy = (round(x, 1), round(y, 1))
    return Chart(path=" ".join(parts), points=len(known), last=known[-1] if known else None, last_xy=last_xy,
                 top=top, top_label=label(top), middle_label=label(top / 2), span_label=f"last {span_text(window)}")


def span_text(window: float) -> str:
    """A window's length as people say it: ``10 min``, ``2 h``, ``90 s``."""
    if window >= 3600 and window % 3600 == 0:
        return f"{int(window // 3600)} h"
    if window >= 60 and window % 60 == 0:
        return f"{int(window // 60)} min"
    return f"{window:g} s"

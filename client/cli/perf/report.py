"""How every ``rill perf`` harness reports: the figures and the command line, and percentiles.

Figures go to stderr as text, or to stdout as one JSON object with ``--json``. Every
report ends with the command that produced it. MB means 10^6 bytes.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any, TypeVar

N = TypeVar("N", int, float)

from rill.client.cli.common import command_line, info

PROGRESS_INTERVAL = 5.0  # seconds between progress lines
MB = 1_000_000


def report(args: argparse.Namespace, result: dict[str, Any], lines: list[str]) -> None:
    """Print the figures (text on stderr, or JSON on stdout) and the command line."""
    result["command"] = command_line(args.argv)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return
    for line in lines:
        info(line)
    info(f"  command: {result['command']}")


def percentile(sorted_samples: Sequence[N], q: float) -> N:
    """Nearest-rank percentile (q in 0..1) of an ascending list."""
    if not sorted_samples:
        raise ValueError("no samples")
    rank = max(1, math.ceil(q * len(sorted_samples)))
    return sorted_samples[min(rank, len(sorted_samples)) - 1]


__all__ = ["MB", "PROGRESS_INTERVAL", "percentile", "report"]

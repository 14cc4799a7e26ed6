"""The loader's output directory: Parquet runs, each committed with its offsets by one rename.

Layout::

    OUT/run=000001/_offsets.json                         the offsets this run loaded up to
    OUT/run=000001/topic=T/partition=P/date=D/part-*.parquet
    OUT/run=000002/...
    OUT/_staging/run=000003/...                          a run in progress (hidden from Spark)
    OUT/_lock                                            held by the running loader (output_lock.py)

A run writes its Parquet files and its ``_offsets.json`` into ``_staging/run=N``, then
renames that directory to ``run=N``: the rename is the commit (seed 002 4.6: the
offsets are stored with the output, so data and offsets are updated together or not
at all). A run killed before the rename leaves only staging files, which the next run
deletes; one killed after it is complete. Spark reading ``OUT`` skips names starting
with ``_`` and sees the columns ``run``, ``topic``, ``partition`` and ``date``.

``_offsets.json``: ``{"format": 1, "run": N, "started_ms": ..., "rows": R,
"start": {"topic": {"partition": offset}}, "end": {...}}``; ``end`` holds every
partition loaded so far (by this run or earlier), so the newest run's is the state.

One loader per output: the loader holds ``OUT/_lock`` for its whole run
(rill.client.spark.output_lock). Where that lock means nothing (an object store mounted
as a file system), :meth:`OutputDir.commit` is the safety net: it reads the newest
committed run again just before the rename and refuses to commit (:class:`OutputMoved`)
when it is not the one the run started from, leaving the staging files to the next run.
That re-check narrows the window for a duplicate to the instant between it and the
rename; only the lock closes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rill.client.spark.output_lock import OutputConflict

__all__ = ["OutputDir", "OutputMoved", "RunManifest", "OFFSETS_FILE"]

OFFSETS_FILE = "_offsets.json"
STAGING = "_staging"
_RUN = re.compile(r"run=(\d{6,})\Z")
FORMAT = 1


@dataclass(frozen=True, slots=True)
class RunManifest:
    """The offsets file of one committed run (offsets as ``{topic: {partition: offset}}``)."""

    run: int
    started_ms: int
    rows: int
    start: Mapping[str, Mapping[str, int]]
    end: Mapping[str, Mapping[str, int]]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "run": self.run, "started_ms": self.started_ms, "rows": self.rows,
                "start": self.start, "end": self.end}


class OutputMoved(OutputConflict):
    """The newest committed run changed while this run was going: another loader wrote the same output."""


def run_name(run: int) -> str:
    return f"run={run:06d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(top: Path) -> None:
    for dirpath, _, filenames in os.walk(top):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _name(m: RunManifest | None) -> str:
    return "none" if m is None else f"run {m.run}"


class OutputDir:
    """The committed runs under ``root`` and the staging area of the next one."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def runs(self) -> list[int]:
        """Committed run numbers, ascending (none for a new directory)."""
        if not self.root.is_dir():
            return []
        found = [_RUN.match(p.name) for p in self.root.iterdir() if p.is_dir()]
        return sorted(int(m.group(1)) for m in found if m)

    def latest(self) -> RunManifest | None:
        """The manifest of the newest committed run, or None when there is none.

        Raises:
            ValueError: its offsets file is unreadable (the directory was edited by hand).
        """
        runs = self.runs()
        if not runs:
            return None
        path = self.root / run_name(runs[-1]) / OFFSETS_FILE
        try:
            data = json.loads(path.read_text())
            return RunManifest(int(data["run"]), int(data["started_ms"]), int(data["rows"]), data["start"],
                               data["end"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot read {path}: {exc}") from exc

    def begin(self) -> tuple[int, Path]:
        """Delete what a killed run left in staging; return the next run number and its staging path."""
        staging = self.root / STAGING
        if staging.exists():
            shutil.rmtree(staging)
        runs = self.runs()
        run = runs[-1] + 1 if runs else 1
        staging.mkdir(parents=True)
        return run, staging / run_name(run)

    def commit(self, staged: Path, manifest: RunManifest, base: RunManifest | None) -> Path:
        """Write the offsets file into ``staged`` and rename it into place: the atomic commit.

        ``base`` is the newest committed run when this run read its start offsets (None: there
        was none); it is read again just before the rename.

        Returns:
            The committed run directory.

        Raises:
            OutputMoved: the newest committed run is no longer ``base``; nothing is committed and
                ``staged`` is left for the next run to delete.
            ValueError: the newest run's offsets file is unreadable (as :meth:`latest`).
        """
        staged.mkdir(parents=True, exist_ok=True)
        _fsync_tree(staged)  # the data must be on disk before the rename makes it visible
        tmp = staged / (OFFSETS_FILE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(manifest.to_json(), f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, staged / OFFSETS_FILE)
        _fsync_dir(staged)
        now = self.latest()
        if now != base:
            raise OutputMoved(f"not committing run {manifest.run} into {self.root}: this run started from "
                              f"{_name(base)}, but the newest committed run is now {_name(now)} with other offsets: "
                              f"another loader wrote this output meanwhile (one loader per output); the staging "
                              f"files are left for the next run to delete")
        final = self.root / run_name(manifest.run)
        os.rename(staged, final)
        _fsync_dir(self.root)
        try:
            staged.parent.rmdir()  # _staging, now empty
        except OSError:
            pass
        return final

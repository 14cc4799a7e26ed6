"""Two loaders on one output: the output's lock lets one run and refuses the other at once, and the
commit's re-check refuses a run when another loader committed meanwhile without the lock."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import RunningBroker
from rill.client.spark.load import load
from rill.client.spark.output import OFFSETS_FILE, OutputDir, OutputMoved, RunManifest
from rill.client.spark.output_lock import LOCK_FILE, OutputLock, OutputLocked
from tests.spark.helpers import create, produce, rows_of, topic_rows
from tests.spark.test_loader import PARTITIONS, TOPIC, finish, loader, produce_orders

pytestmark = pytest.mark.slow


def refused(proc: subprocess.Popen[bytes], out: Path, holder: int) -> None:
    """``proc`` exited 1 printing one error line that names the output and the lock's holder."""
    _, err = proc.communicate(timeout=120)
    details = json.loads((out / LOCK_FILE).read_text())
    assert proc.returncode == 1
    assert details["pid"] == holder
    assert err.decode().splitlines() == [
        f"rill: error: another loader is writing {out}: pid {holder} on host {details['host']} since "
        f"{details['started']} holds {out / LOCK_FILE} (one loader per output; wait for it to finish)"]


def test_two_loaders_on_one_output(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    """Of two loaders started together one loads and the other fails at once, as does one started later while
    the first holds the lock (held until its commit); the output holds every message exactly once."""
    out = tmp_path / "out"
    create(broker, TOPIC, PARTITIONS)
    produce_orders(broker, 1, 2000)
    pair = [loader(broker, out), loader(broker, out)]
    while not (out / LOCK_FILE).exists() or not (out / LOCK_FILE).read_text():
        time.sleep(0.01)
    winner = next(p for p in pair if p.pid == json.loads((out / LOCK_FILE).read_text())["pid"])
    late = loader(broker, out)
    refused(next(p for p in pair if p is not winner), out, winner.pid)
    refused(late, out, winner.pid)
    while not (out / "_staging").exists():  # the winner is writing its run
        assert winner.poll() is None
        time.sleep(0.01)
    with pytest.raises(OutputLocked):
        OutputLock.acquire(out)
    finish(winner)
    assert OutputDir(out).runs() == [1]
    assert rows_of(spark.read.parquet(str(out))) == sorted(topic_rows(broker, TOPIC, PARTITIONS))


def test_commit_refused_when_another_loader_committed(spark: Any, broker: RunningBroker, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that another loader (one without the lock) commits after this run planned makes this run's commit
    refuse: OutputMoved, the other run intact, this run's staging files left, the lock released."""
    out = tmp_path / "out"
    create(broker, TOPIC, 1)
    produce(broker, TOPIC, 0, [b"a", b"b"])
    other = RunManifest(1, 0, 2, {TOPIC: {"0": 0}}, {TOPIC: {"0": 22}})
    begin = OutputDir.begin

    def other_commits_then_begin(self: OutputDir) -> tuple[int, Path]:
        (out / "run=000001").mkdir()
        (out / "run=000001" / OFFSETS_FILE).write_text(json.dumps(other.to_json()))
        return begin(self)  # run 2, planned from no run: without the re-check, every row twice

    monkeypatch.setattr(OutputDir, "begin", other_commits_then_begin)
    with pytest.raises(OutputMoved, match="this run started from none, but the newest committed run is now run 1"):
        load(spark, broker.address, [TOPIC], out)
    assert OutputDir(out).runs() == [1] and OutputDir(out).latest() == other
    assert list((out / "_staging" / "run=000002").rglob("*.parquet"))
    with OutputLock.acquire(out) as lock:
        assert lock.held

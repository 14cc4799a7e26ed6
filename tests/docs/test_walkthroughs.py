"""The docs' walkthroughs, run word for word: each command block in order, each output compared by shape.

A change that breaks a documented command, or changes what it prints beyond numbers and
times, fails here (tests/docs/walkthrough.py says what "shape" is). The commands run in a
network namespace of the test's own (tests/docs/shell_session.py), so the docs' fixed
ports are free.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.shell_session import ShellSession
from tests.docs.walkthrough import mismatch, steps

DOCS = Path(__file__).resolve().parents[2] / "docs"


def run_walkthrough(doc: str, workdir: Path) -> None:
    failures = []
    with ShellSession(workdir) as shell:
        for step in steps((DOCS / doc).read_text()):
            if step.skip:
                continue
            printed = shell.run(step)
            if step.expected is not None:
                why = mismatch(step.expected, printed)
                if why:
                    failures.append(f"docs/{doc} line {step.line}:\n{step.code}\n{why}\nprinted:\n{printed}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    run_walkthrough("quickstart.md", tmp_path)


@pytest.mark.slow
def test_the_cluster_walkthrough_runs_as_written(tmp_path: Path) -> None:
    run_walkthrough("cluster.md", tmp_path)


@pytest.mark.slow
def test_the_security_walkthrough_runs_as_written(tmp_path: Path) -> None:
    run_walkthrough("security.md", tmp_path)


@pytest.mark.slow
def test_the_console_walkthrough_runs_as_written(tmp_path: Path) -> None:
    run_walkthrough("console.md", tmp_path)

"""The tree's layout: every package is installed, imports go one way, and file names do not repeat."""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOPS = {"client": "rill.client", "broker": "rill.broker", "coordinator": "rill.coordinator"}
# a package's own errors and a console script's main keep the conventional names
SHARED_NAMES = {"__init__.py", "errors.py", "main.py"}


def modules() -> list[Path]:
    return [p for top in TOPS for p in (ROOT / top).rglob("*.py")]


def test_every_package_folder_is_listed_for_installation() -> None:
    """A non-editable install (pip install ., .ci/perf-compare) ships every package folder."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {TOPS[init.relative_to(ROOT).parts[0]] + "".join("." + part for part in init.parent.relative_to(
        ROOT / init.relative_to(ROOT).parts[0]).parts) for top in TOPS for init in (ROOT / top).rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_imports_go_one_way() -> None:
    """client imports neither coordinator nor broker; coordinator never imports broker (DESIGN.md)."""
    forbidden = {"client": ("rill.coordinator", "rill.broker"), "coordinator": ("rill.broker",)}
    wrong = []
    for path in modules():
        banned = forbidden.get(path.relative_to(ROOT).parts[0], ())
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith(banned) and banned]
    assert wrong == []


def test_no_two_modules_share_a_file_name() -> None:
    """A file name says what is inside, so it is unique across client, broker and coordinator."""
    counts = Counter(p.name for p in modules() if p.name not in SHARED_NAMES)
    assert [name for name, n in counts.items() if n > 1] == []

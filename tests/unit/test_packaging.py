"""What the built wheel carries: the licence, type hints and the .proto files, beside the code."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(ROOT)], check=True, timeout=300,
                   capture_output=True)
    (path,) = out.glob("rill-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow
def test_the_wheel_declares_and_carries_the_apache_licence(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
    licence = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
    assert b"Apache License" in wheel.read(licence) and b"Version 2.0" in wheel.read(licence)


@pytest.mark.slow
def test_the_wheel_ships_type_hints_and_the_proto_files(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert {"rill/client/py.typed", "rill/broker/py.typed", "rill/coordinator/py.typed"} <= names
    protos = {p.name for p in (ROOT / "proto" / "rill" / "v1").glob("*.proto")}
    assert protos and {f"rill/v1/{p}" for p in protos} <= names
    assert "rill/v1/coordinator_pb2.py" in names


@pytest.mark.slow
def test_the_wheel_ships_the_consoles_templates_and_static_files(wheel: zipfile.ZipFile) -> None:
    """``rill console`` renders from files beside its modules: a wheel without them would serve errors."""
    names = set(wheel.namelist())
    console = ROOT / "client" / "console"
    shipped = {f"rill/client/console/{p.relative_to(console)}" for p in
               [*(console / "templates").glob("*.html"), *(console / "static").iterdir()]}
    assert "rill/client/console/templates/base.html" in shipped and shipped <= names

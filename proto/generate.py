"""Regenerate the Python code for proto/rill/v1/*.proto (committed beside the sources).

    python3 proto/generate.py           # rewrite the generated files
    python3 proto/generate.py --check   # exit 1 if they differ from what is committed

The generated modules import each other as ``rill.v1.*``; pyproject.toml maps
``rill.v1`` to proto/rill/v1, so the import path matches the proto package.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = sorted((HERE / "rill" / "v1").glob("*.proto"))
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out: Path) -> None:
    from grpc_tools import protoc

    args = ["protoc", f"-I{HERE}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}",
            *[str(p) for p in SOURCES]]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def generated_names() -> list[str]:
    return [p.stem + s for p in SOURCES for s in SUFFIXES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        produced = Path(tmp) / "rill" / "v1"
        target = HERE / "rill" / "v1"
        stale = [n for n in generated_names()
                 if not (target / n).exists() or not filecmp.cmp(produced / n, target / n, shallow=False)]
        if args.check:
            for name in stale:
                sys.stderr.write(f"stale generated file: proto/rill/v1/{name} (run python3 proto/generate.py)\n")
            return 1 if stale else 0
        for name in generated_names():
            shutil.copyfile(produced / name, target / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The C accelerator is built where the project is installed by its own setup."""

from __future__ import annotations

import os

import pytest

from rill.client.protocol import messages


@pytest.mark.skipif(os.environ.get("RILL_PURE_PYTHON") == "1",
                    reason="RILL_PURE_PYTHON=1 declares a machine without a C compiler")
def test_accelerator_is_built() -> None:
    """pip install -e . compiled client/_speedups.c (the throughput figures depend on it)."""
    assert messages.ACCELERATED, "rill.client._speedups did not build: is gcc or zlib.h missing?"

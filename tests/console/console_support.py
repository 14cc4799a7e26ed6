"""Helpers of the console tests: a console over a broker (in-process app or served), the cluster's truth, waits.

``console_args`` goes through ``rill console``'s own argument parser, so the tests build
the console exactly as the command does. Waits are bounded (:func:`wait_until`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rill.client.admin import AdminClient
from rill.client.cli.main import build_parser
from rill.client.cli.console_command import console_settings
from rill.client.console import ClusterAccess, ConsoleServer, create_app
from rill.v1 import coordinator_pb2 as pb

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its TestClient; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
REFRESH_S = 0.3


def console_args(bootstrap: str, *extra: str) -> Any:
    """``rill console --bootstrap-server BOOTSTRAP ...`` parsed (refresh every REFRESH_S, a 60 s window)."""
    return build_parser().parse_args(["console", "--bootstrap-server", bootstrap, "--refresh-seconds", str(REFRESH_S),
                                      "--lag-window-seconds", "60", *extra])


@contextmanager
def console_client(bootstrap: str, *extra: str) -> Iterator[TestClient]:
    """The console app over ``bootstrap`` in a TestClient (its sampler running), as http://127.0.0.1."""
    args = console_args(bootstrap, *extra)
    app = create_app(ClusterAccess(args), console_settings(args))
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        assert app.state.console.sampler.wait_for_rounds(1, 15), "the sampler took no sample within 15 s"
        yield client


@contextmanager
def served_console(bootstrap: str, *extra: str) -> Iterator[ConsoleServer]:
    """The console served over HTTP on a free port of 127.0.0.1, as ``rill console`` serves it."""
    args = console_args(bootstrap, "--port", "0", *extra)
    server = ConsoleServer(create_app(ClusterAccess(args), console_settings(args)), args.host, args.port)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_until(check: Callable[[], Any], timeout: float = 10.0, what: str = "the condition") -> Any:
    """``check()``'s first truthy result, asked every 50 ms; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def committed(grpc_address: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as the coordinator has them."""
    with AdminClient(grpc_address) as admin:
        return {(o.topic, o.partition): o.offset for o in admin.fetch_offsets(group).offsets}


def commit(grpc_address: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    with AdminClient(grpc_address) as admin:
        assert admin.commit(group, [(t, p, o) for (t, p), o in offsets.items()]).error_code == pb.NONE


def screenshot_path(name: str) -> str:
    """Where a page's screenshot goes: test-artifacts/console/<name>.png at the repository's top."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return str(ARTIFACTS / f"{name}.png")

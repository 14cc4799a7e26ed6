"""Shared fixtures: an in-process broker over real TCP, and raw protocol helpers."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.testing import RunningBroker, running_broker
from tests.zk import ZkEnsemble, ZkNode, ZkServer


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "data", num_partitions=2) as b:
        yield b


class RawClient:
    """A bare socket speaking frames: send bytes, read one size-prefixed response body."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("closed")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def response(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def request(self, frame: bytes) -> bytes:
        self.send(frame)
        return self.response()

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(broker: RunningBroker) -> Iterator[RawClient]:
    client = RawClient(broker.host, broker.port)
    yield client
    client.close()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first, and every Spark test in one xdist group.

    ``.ci/run`` runs the suite on several workers (pytest-xdist, ``--dist loadgroup``):
    started first, the long tests overlap the many short ones instead of finishing last
    on one worker while the others idle; the Spark tests share one worker, so the run
    starts one SparkSession (they are CPU-bound: several at once only slow each other).
    Without xdist the order changes nothing a test relies on (each has its own broker).
    """
    spark_dir = Path(__file__).parent / "spark"
    for item in items:
        if spark_dir in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("spark"))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise as collected


def pytest_configure(config: pytest.Config) -> None:
    """Keep structlog quiet in tests (events still reach structlog.testing.capture_logs)."""
    import structlog

    structlog.reset_defaults()  # importing rill.client routed events to `logging`; tests capture them instead
    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())


# --- ZooKeeper (tests/zk.py): a real server from Debian's jar -------------------------------

@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkServer]:
    """One standalone ZooKeeper for the whole session (started on first use)."""
    with ZkServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


ZK_NODES = pytest.StashKey[list[ZkNode]]()


def _show_zk_log_on_failure(request: pytest.FixtureRequest, nodes: list[ZkNode]) -> None:
    request.node.stash.setdefault(ZK_NODES, []).extend(nodes)


@pytest.fixture
def zk_connect(request: pytest.FixtureRequest, zk_server: ZkServer) -> Iterator[str]:
    """A connect string with this test's own chroot (``127.0.0.1:PORT/rill-test-<uuid>``), created empty."""
    from kazoo.client import KazooClient

    _show_zk_log_on_failure(request, [zk_server])
    chroot = f"/rill-test-{uuid.uuid4().hex}"
    root = KazooClient(hosts=zk_server.address, timeout=10)
    root.start(timeout=10)
    try:
        root.create(chroot)
        yield zk_server.address + chroot
        root.delete(chroot, recursive=True)
    finally:
        root.stop()
        root.close()


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:
    """A kazoo client in this test's chroot (``zk_connect``), started, and stopped after the test."""
    client = KazooClient(hosts=zk_connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_ensemble(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ZkEnsemble]:
    """A three-node ZooKeeper ensemble for this test (started on demand)."""
    with ZkEnsemble(tmp_path / "ensemble") as ensemble:
        _show_zk_log_on_failure(request, ensemble.nodes)
        yield ensemble


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failing test, attach each ZooKeeper node's log (path and tail) to the report, and what any
    fixture value with a ``failure_sections()`` offers (a broker cluster: each broker's state and log tail)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for node in item.stash.get(ZK_NODES, []):
            report.sections.append((f"ZooKeeper log {node.log_path}", node.log_tail()))
        for value in getattr(item, "funcargs", {}).values():
            sections = getattr(value, "failure_sections", None)
            if callable(sections):
                report.sections.extend(sections())

"""Shared fixtures: an in-process broker over real TCP, and raw protocol helpers."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker


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


def pytest_configure(config: pytest.Config) -> None:
    """Keep structlog quiet in tests (events still reach structlog.testing.capture_logs)."""
    import structlog

    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())

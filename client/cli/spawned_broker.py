"""A ``rill-broker`` child process for benchmarks that measure the broker itself.

Starting, stopping and killing the broker is part of what ``rill perf partitions`` and
``rill perf scrub`` measure (start-up and stop times, descriptors, resident memory),
so they start their own: this module runs ``python -m rill.broker.main`` on a free
loopback port, reads its port from the ``broker.ready`` line it logs, and reads its
descriptor count and RSS from ``/proc``. It imports nothing of the broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any


class SpawnedBroker:
    """One broker process on ``data_dir`` with ``settings`` (``--set KEY=VALUE`` each).

    ``metrics`` is its ``--metrics-port``: -1 (the default) a free port, 0 none, else that
    port; once started, ``metrics_port`` is the port it serves /metrics on (0: none).
    """

    def __init__(self, data_dir: str, settings: dict[str, Any] | None = None, *,
                 zookeeper: str | None = None, broker_id: int | None = None, metrics: int = -1) -> None:
        self.data_dir = data_dir
        self.settings = settings or {}
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.metrics = metrics
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.grpc_port = 0
        self.metrics_port = 0
        self.log_path = ""

    def start(self, timeout: float = 600.0) -> float:
        """Start it (again, after a stop, on the same data); return the seconds until it served (its
        ``broker.ready`` line). Each start logs to a file of its own (``log_path``)."""
        args = [sys.executable, "-m", "rill.broker.main", "--data-dir", self.data_dir, "--port", "0",
                "--grpc-port", "0", "--metrics-port", str(self.metrics), "--host", "127.0.0.1", "--log-format", "json"]
        if self.zookeeper is not None:
            args += ["--zookeeper", self.zookeeper]
        if self.broker_id is not None:
            args += ["--broker-id", str(self.broker_id)]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        self.log_path = f"{self.data_dir}.broker-{time.time_ns()}.log"
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log)
        while time.monotonic() - started < timeout:
            ready = self.event("broker.ready")
            if ready is not None:
                self.port = int(ready["port"])
                self.grpc_port = int(ready.get("grpc_port") or 0)
                self.metrics_port = int(ready.get("metrics_port") or 0)
                return time.monotonic() - started
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(0.02)
        raise TimeoutError(f"the broker did not start in {timeout} s; see {self.log_path}")

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        with open(self.log_path, errors="replace") as f:
            for line in f:
                if name in line:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if event.get("event") == name:
                        out.append(event)
        return out

    def event(self, name: str) -> dict[str, Any] | None:
        found = self.events(name)
        return found[-1] if found else None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self, timeout: float = 600.0) -> float:
        """SIGTERM (a graceful stop); return the seconds until the process ended."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        if code != 0:
            raise RuntimeError(f"the broker stopped with exit code {code}; see {self.log_path}")
        return time.monotonic() - started

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(60)


def raise_own_fd_limit() -> int:
    """Raise this process's open-files limit to its hard limit (for clients holding many connections)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard

"""Start and stop ``rill-broker`` as a real process for tests.

``RILL_TEST_GRPC_SERVER`` (``sync`` or ``aio``), when set, becomes a leading
``--set grpc.server=...``; a ``--set grpc.server=...`` among the extra arguments wins.
``host`` is the address it binds (127.0.0.1 unless given) and ``prefix`` goes before its
command line (``ip netns exec NAME`` in the network-partition tests: that command
replaces itself with the broker, so the PID is still the broker's).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


class BrokerProcess:
    """A ``rill-broker`` subprocess on a free port of ``host``, reporting its port via its ready event."""

    def __init__(self, data_dir: Path, *extra: str, fd_limit: int | None = None, host: str = "127.0.0.1",
                 prefix: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.extra = extra
        self.host = host
        self.prefix = list(prefix)
        self.fd_limit = fd_limit  # RLIMIT_NOFILE (soft and hard) of the broker process, when set
        self.proc: subprocess.Popen[bytes] | None = None
        # ports pinned on the command line (a restart on its previous ports) are known before it is ready:
        # a test may find it leader in ZooKeeper while it starts
        self.port = _pinned(extra, "--port")
        self.grpc_port = _pinned(extra, "--grpc-port")
        self.metrics_port: int | None = None  # known once ready
        self.log_path = data_dir.parent / f"broker-{time.time_ns()}.log"

    def start(self, timeout: float = 30.0) -> BrokerProcess:
        self.log_file = open(self.log_path, "wb")
        cmd = [*self.prefix, sys.executable, "-m", "rill.broker.main", "--data-dir", str(self.data_dir), "--port", "0",
               "--grpc-port", "0", "--metrics-port", "-1", "--host", self.host, "--log-format", "json",
               *grpc_server_default(),
               # a small groups topic keeps test clusters light (50 partitions x 3 replicas otherwise); --set wins
               "--set", "offsets.topic.num.partitions=3", *self.extra]
        limit = self.fd_limit
        preexec = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))) if limit else None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log_file, preexec_fn=preexec)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if event.get("event") == "broker.ready":
                    self.port = int(event["port"])
                    self.grpc_port = int(event["grpc_port"])
                    self.metrics_port = event.get("metrics_port")
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_path.read_text()}")
            time.sleep(0.05)
        raise TimeoutError(f"broker not ready in {timeout}s:\n{self.log_path.read_text()}")

    def events(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def status(self) -> str:
        """``running (pid N)``, ``exited N (pid N)`` or ``not started``: for failure reports."""
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        return f"running (pid {self.proc.pid})" if code is None else f"exited {code} (pid {self.proc.pid})"

    def rss_mb(self) -> float:
        """The broker's resident memory (VmRSS), in MiB."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def descriptors(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log_file.close()

    def terminate(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        self.log_file.close()
        return code


def grpc_server_default() -> list[str]:
    """``--set grpc.server=$RILL_TEST_GRPC_SERVER`` when that is set (later ``--set`` flags override it)."""
    kind = os.environ.get("RILL_TEST_GRPC_SERVER")
    return ["--set", f"grpc.server={kind}"] if kind else []


def _pinned(args: Sequence[str], flag: str) -> int:
    """The last value of ``flag`` in ``args`` (0 when absent: a port the broker picks)."""
    values = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == flag]
    return int(values[-1]) if values else 0

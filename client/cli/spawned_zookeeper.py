"""A ZooKeeper of its own for benchmarks and tests: Debian's jar started with ``java``, on free loopback ports.

``rill perf replication`` and ``rill perf failover`` start one when no ``--zookeeper`` is
given, and the test suite starts its own (tests/conftest.py). ``ZkServer`` is one
standalone node (``ZooKeeperServerMain``); ``ZkEnsemble`` is three ``QuorumPeerMain``
nodes. Data and logs live in the given work directory; readiness is the ``srvr``
four-letter word; every process is stopped by the PID this module started. When the
jar is missing, ``ZooKeeperMissing`` tells to run ``bash .ci/setup``.

A node listens on 127.0.0.1 unless given ``host``; ``prefix`` goes before the ``java``
command line (the network-partition tests pass ``ip netns exec <namespace>`` and the
namespace's address, tests/process/netns.py).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

JAVA_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest Class-Path names its dependencies; slf4j-simple sends the log to stderr.
JARS = ("zookeeper.jar", "slf4j-simple.jar")


class ZooKeeperMissing(RuntimeError):
    pass


def classpath() -> str:
    missing = [j for j in JARS if not (JAVA_DIR / j).exists()]
    if missing:
        raise ZooKeeperMissing(
            f"ZooKeeper is not installed ({', '.join(str(JAVA_DIR / j) for j in missing)} not found): "
            "run `bash .ci/setup` (it installs Debian's zookeeper package)")
    return ":".join(str(JAVA_DIR / j) for j in JARS)


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def four_letter(port: int, word: bytes, timeout: float = 1.0, host: str = "127.0.0.1") -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks: list[bytes] = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


BASE_CFG = """tickTime=500
initLimit=10
syncLimit=5
dataDir={data}
clientPort={port}
clientPortAddress={host}
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,envi
minSessionTimeout=1000
"""


class ZkNode:
    """One ZooKeeper server process; ``cfg_extra`` adds quorum lines.

    It listens on ``host:port``; ``prefix`` is prepended to its command line (``ip netns exec
    NAME``: started so, the process still has the PID this object stops).
    """

    def __init__(self, work: Path, port: int, main_class: str, cfg_extra: str = "", myid: int | None = None, *,
                 host: str = "127.0.0.1", prefix: Sequence[str] = ()) -> None:
        self.work = work
        self.port = port
        self.host = host
        self.prefix = list(prefix)
        self.main_class = main_class
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = work / "zookeeper.log"
        data = work / "data"
        data.mkdir(parents=True, exist_ok=True)
        if myid is not None:
            (data / "myid").write_text(f"{myid}\n")
        self.cfg_path = work / "zoo.cfg"
        self.cfg_path.write_text(BASE_CFG.format(data=data, port=port, host=host) + cfg_extra)

    def start(self) -> None:
        cp = classpath()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.prefix, "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                 "-Dzookeeper.snapshot.trust.empty=true", "-cp", cp, self.main_class, str(self.cfg_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def ok(self) -> bool:
        try:
            return four_letter(self.port, b"ruok", host=self.host) == b"imok"
        except OSError:
            return False

    def serving(self) -> bool:
        """True when the node answers requests (``srvr`` reports a mode, not "not currently serving")."""
        try:
            return b"Mode:" in four_letter(self.port, b"srvr", host=self.host)
        except OSError:
            return False

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"ZooKeeper exited with {self.proc.returncode}; log {self.log_path}:\n{self.log_tail()}")
            if self.serving():
                return
            time.sleep(0.05)
        raise TimeoutError(
            f"ZooKeeper on {self.host}:{self.port} not ready in {timeout}s; log {self.log_path}:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop this node (the process this object started, by its PID)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def log_tail(self, chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-chars:]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ZkServer(ZkNode):
    """A standalone ZooKeeper (``ZooKeeperServerMain``): on a free loopback port, or on ``host:port``."""

    def __init__(self, work: Path, *, host: str = "127.0.0.1", port: int = 0, prefix: Sequence[str] = ()) -> None:
        super().__init__(work, port or free_ports(1)[0], "org.apache.zookeeper.server.ZooKeeperServerMain",
                         host=host, prefix=prefix)

    def __enter__(self) -> ZkServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ZkEnsemble:
    """A three-node ensemble (``QuorumPeerMain``) on loopback."""

    def __init__(self, work: Path, size: int = 3) -> None:
        ports = free_ports(3 * size)
        servers = "".join(f"server.{i + 1}=127.0.0.1:{ports[3 * i + 1]}:{ports[3 * i + 2]}\n" for i in range(size))
        self.nodes = [ZkNode(work / f"node{i + 1}", ports[3 * i], "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                             servers, myid=i + 1) for i in range(size)]

    @property
    def connect(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def __enter__(self) -> ZkEnsemble:
        for n in self.nodes:
            n.start()
        try:
            for n in self.nodes:
                n.wait_ready(60.0)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {n.log_path}\n{n.log_tail(3000)}" for n in self.nodes)


"""Network namespaces for partition tests: one per node, a bridge between them, links cut with iptables.

Topology (``NetLab(["zk", "b1", "b2", ...])``)::

    root namespace: the test process (the observer), bridge rb<tag> at 10.234.<y>.254/24
        |-- veth rh<tag><i> <-> rn<tag><i> in namespace rill-<tag>-<node>, address 10.234.<y>.<i + 1>

``<tag>`` is random per lab and ``<y>`` a /24 no route or address of the root namespace
uses (chosen under a file lock, so concurrent labs do not pick the same one). A process
runs in a node with ``lab.prefix(node) + argv`` (``ip netns exec`` replaces itself with the
command: the PID is the process's own); a thread of the test process moves itself into a
node with :func:`enter` (``setns``: only that thread moves; threads it starts follow it).

Cutting: :meth:`NetLab.cut` ``(src, dst)`` adds, inside ``dst``'s namespace,
``iptables -A INPUT -s <src> -j DROP``: what ``src`` sends ``dst`` vanishes, so connects
and calls time out (Jepsen's partition; REJECT would refuse them at once). One direction
is enough to break TCP (the other side's answers or acknowledgements never arrive), but
who notices first differs. :meth:`NetLab.heal` deletes one rule, :meth:`NetLab.heal_all`
flushes every node's INPUT chain. The root namespace holds no rule: the observer (ZooKeeper
reads, final reads) is never cut.

:func:`probe` checks, once per process, that namespaces, veths, a bridge, ``setns`` and an
iptables DROP rule inside a namespace work, and raises :class:`NetLabUnavailable` with
what to install otherwise: the tests fail loudly rather than skip.

:meth:`NetLab.close` deletes the namespaces (with them the veths) and the bridge; it
touches nothing it did not create. It does not stop processes: stop those first.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

__all__ = ["NetLab", "NetLabUnavailable", "Node", "enter", "probe"]

BASE = "10.234"  # labs take a /24 inside 10.234.0.0/16
LOCK_PATH = "/run/rill-netlab.lock"
CLONE_NEWNET = 0x40000000
NEEDS = ("the network-partition tests need root, iproute2 (`ip`) and iptables: "
         "`apt-get install -y --no-install-recommends iproute2 iptables` (bash .ci/setup installs them)")


class NetLabUnavailable(RuntimeError):
    """The machine cannot run the network-partition tests (the message says what is missing)."""


class Node(NamedTuple):
    name: str       # the test's name for it ("zk", "b1", "clients")
    namespace: str  # rill-<tag>-<name>
    ip: str


def run(*argv: str, check: bool = True, timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
    """Run a command; raise :class:`NetLabUnavailable` with its output when it fails and ``check``."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise NetLabUnavailable(f"{argv[0]} not found: {NEEDS}") from exc
    if check and done.returncode != 0:
        raise NetLabUnavailable(f"`{' '.join(argv)}` failed with {done.returncode}: "
                                f"{(done.stderr or done.stdout).strip()}\n{NEEDS}")
    return done


def enter(namespace: str) -> None:
    """Move the calling thread (only it) into the network namespace ``namespace`` (by its /run/netns name)."""
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns = getattr(os, "setns", None)  # Python 3.12+
        if setns is not None:
            setns(fd, CLONE_NEWNET)
            return
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)


class NetLab:
    """Namespaces ``rill-<tag>-<name>`` for ``names`` on one bridge; usable as a context manager."""

    def __init__(self, names: Sequence[str]) -> None:
        self.tag = secrets.token_hex(3)[:5]
        self.bridge = f"rb{self.tag}"
        self.names = list(names)
        self.nodes: dict[str, Node] = {}
        self.bridge_ip = ""
        self.rules: set[tuple[str, str]] = set()  # (src, dst) cut
        self._made_bridge = False
        self._made_namespaces: list[str] = []
        self._made_links: list[str] = []  # veth ends created in the root namespace
        self._lock = threading.Lock()

    def __enter__(self) -> NetLab:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building and tearing down ------------------------------------------------------------

    def start(self) -> None:
        with open(LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # choosing a /24 and taking it is one step
            subnet = free_subnet()
            run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            self.bridge_ip = f"{subnet}.254"
            run("ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i, name in enumerate(self.names):
            self.nodes[name] = self._add_node(i, name, f"{subnet}.{i + 1}")

    def _add_node(self, i: int, name: str, ip: str) -> Node:
        namespace = f"rill-{self.tag}-{name}"
        outside, inside = f"rh{self.tag}{i}", f"rn{self.tag}{i}"
        run("ip", "netns", "add", namespace)
        self._made_namespaces.append(namespace)
        node = Node(name, namespace, ip)
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        self._made_links.append(outside)
        run("ip", "link", "set", inside, "netns", namespace)
        run("ip", "link", "set", outside, "master", self.bridge)
        run("ip", "link", "set", outside, "up")
        run("ip", "-n", namespace, "addr", "add", f"{ip}/24", "dev", inside)
        run("ip", "-n", namespace, "link", "set", inside, "up")
        run("ip", "-n", namespace, "link", "set", "lo", "up")
        return node

    def close(self) -> None:
        """Delete this lab's namespaces (their veths go with them) and bridge. Idempotent; never raises."""
        for namespace in self._made_namespaces:
            run("ip", "netns", "del", namespace, check=False)
        for link in self._made_links:  # gone with its peer's namespace, unless the move failed
            if os.path.exists(f"/sys/class/net/{link}"):
                run("ip", "link", "del", link, check=False)
        self._made_namespaces.clear()
        self._made_links.clear()
        if self._made_bridge:
            run("ip", "link", "del", self.bridge, check=False)
            self._made_bridge = False
        self.nodes.clear()
        self.rules.clear()

    # -- running things inside --------------------------------------------------------------

    def prefix(self, name: str) -> list[str]:
        """The argv prefix that runs a command inside ``name``'s namespace."""
        return ["ip", "netns", "exec", self.nodes[name].namespace]

    def ip(self, name: str) -> str:
        return self.nodes[name].ip

    def enter(self, name: str) -> None:
        """Move the calling thread into ``name``'s namespace."""
        enter(self.nodes[name].namespace)

    def iptables(self, name: str, *args: str) -> None:
        run(*self.prefix(name), "iptables", "-w", *args)

    # -- cutting and healing ------------------------------------------------------------------

    def cut(self, src: str, dst: str) -> None:
        """Packets from ``src`` to ``dst`` vanish from now on (a rule in ``dst``'s namespace). Idempotent."""
        with self._lock:
            if (src, dst) in self.rules:
                return
            self.iptables(dst, "-A", "INPUT", "-s", self.ip(src), "-j", "DROP")
            self.rules.add((src, dst))

    def heal(self, src: str, dst: str) -> None:
        """Packets from ``src`` reach ``dst`` again. Idempotent."""
        with self._lock:
            if (src, dst) not in self.rules:
                return
            self.iptables(dst, "-D", "INPUT", "-s", self.ip(src), "-j", "DROP")
            self.rules.discard((src, dst))

    def cut_both(self, a: str, b: str) -> None:
        self.cut(a, b)
        self.cut(b, a)

    def heal_both(self, a: str, b: str) -> None:
        self.heal(a, b)
        self.heal(b, a)

    def isolate(self, group: Sequence[str], others: Sequence[str]) -> None:
        """Cut every node of ``group`` from every node of ``others``, both ways (a partition)."""
        for a in group:
            for b in others:
                self.cut_both(a, b)

    def heal_all(self) -> None:
        with self._lock:
            for name in {dst for _, dst in self.rules}:
                self.iptables(name, "-F", "INPUT")
            self.rules.clear()


def free_subnet() -> str:
    """A ``10.234.<y>`` no address or route of the root namespace overlaps (call under LOCK_PATH)."""
    used = run("ip", "-4", "-o", "addr").stdout + run("ip", "-4", "route").stdout
    nets = []
    for word in used.split():
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_network(word, strict=False))
    for y in secrets.SystemRandom().sample(range(1, 255), 254):
        candidate = ipaddress.ip_network(f"{BASE}.{y}.0/24")
        if not any(candidate.overlaps(n) for n in nets if n.prefixlen > 0):
            return f"{BASE}.{y}"
    raise NetLabUnavailable(f"no free /24 left in {BASE}.0.0/16")


_probed: str | None = None  # "" when the probe passed, else why it failed


def probe() -> None:
    """Check once per process that this machine can run the lab; raise NetLabUnavailable with the reason."""
    global _probed
    if _probed is None:
        try:
            _probe()
            _probed = ""
        except (NetLabUnavailable, OSError) as exc:
            _probed = str(exc)
    if _probed:
        raise NetLabUnavailable(_probed)


def _probe() -> None:
    if os.geteuid() != 0:
        raise NetLabUnavailable(f"not root (euid {os.geteuid()}): {NEEDS}")
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            raise NetLabUnavailable(f"`{tool}` is not installed: {NEEDS}")
    with NetLab(["a", "b"]) as lab:
        with in_thread(lab, "a", _listen, lab.ip("a")) as port:
            assert isinstance(port, int)
            if not _connects(lab, "b", lab.ip("a"), port, 5.0):
                raise NetLabUnavailable(f"a namespace cannot reach another across bridge {lab.bridge} "
                                        "(is the root namespace's iptables FORWARD chain dropping bridged traffic?)")
            lab.cut("b", "a")
            if _connects(lab, "b", lab.ip("a"), port, 0.5):
                raise NetLabUnavailable("an iptables DROP rule inside a namespace did not cut the link")
            lab.heal("b", "a")
            if not _connects(lab, "b", lab.ip("a"), port, 5.0):
                raise NetLabUnavailable("deleting the iptables DROP rule did not heal the link")


def _listen(ip: str) -> socket.socket:
    server = socket.socket()
    server.bind((ip, 0))
    server.listen(8)
    return server


@contextlib.contextmanager
def in_thread(lab: NetLab, name: str, make: Callable[[str], socket.socket], ip: str) -> Iterator[int]:
    """A listening socket made in ``name``'s namespace (by a thread there); yields its port."""
    made: list[socket.socket | BaseException] = []

    def build() -> None:
        try:
            lab.enter(name)
            made.append(make(ip))
        except BaseException as exc:
            made.append(exc)

    thread = threading.Thread(target=build, daemon=True)
    thread.start()
    thread.join(10)
    if not made or isinstance(made[0], BaseException):
        raise NetLabUnavailable(f"could not listen inside a namespace: {made[0] if made else 'timed out'!r}")
    server = made[0]
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


def _connects(lab: NetLab, name: str, ip: str, port: int, timeout: float) -> bool:
    """Whether a TCP connect from ``name``'s namespace to ``ip:port`` succeeds within ``timeout``."""
    result: list[bool] = []

    def attempt() -> None:
        try:
            lab.enter(name)
            with socket.create_connection((ip, port), timeout=timeout):
                result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=attempt, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(timeout + 5)
    return bool(result and result[0]) and time.monotonic() - started < timeout + 5

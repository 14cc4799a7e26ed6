"""Registering the broker in ZooKeeper, the Kafka 0.7 way (seed 004 "ZooKeeper").

With ``zookeeper.connect`` set the broker keeps, in its own ZooKeeper session:

    /brokers/ids/[broker_id]         -> "creator:host:port"   (ephemeral)
    /brokers/topics/[topic]/[id]     -> partition count       (ephemeral, one per topic it holds)
    /rill/brokers/[broker_id]        -> {"host": .., "port": .., "grpc_port": .., "grpc_tls_port": ..,
                                         "endpoints": ..}  (ephemeral)
    /rill/topics/[topic]             -> {"partitions": [[broker_id, partition], ...]}  (persistent)

The first two are Kafka 0.7's layout, value for value; the last two are rill's own (a
0.7 client never reads them): where the broker's gRPC services listen, and the topic's
partition map for native clients, to which each broker appends its partitions of the
topic (never reordering, so the cluster-wide number of a partition never changes).

``creator`` is ``host-<ms timestamp>`` as Kafka 0.7 wrote it, and every intermediate
node it creates (``/brokers``, ``/brokers/topics/[topic]`` ...) holds that creator id.

Start-up (``start()``) registers synchronously: an id held by another live session is
an error (``ZkRegistrationError``), after waiting up to one session timeout for a node
left by a dead session to vanish. Afterwards a single worker thread does every write:
``topics_changed()`` (called on the broker's event loop, after a topic is created or
deleted) only wakes it, and it also
wakes on every session state change. When it finds the session is not the one it
registered with (the old one expired), it registers everything again; a node still
owned by a session that is not ours is deleted only if that session was our own
earlier one, and otherwise waited for. ``close()`` ends the session, which removes
the ephemerals at once.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from rill.client.zookeeper.ephemeral import create_or_adopt
from rill.client.zookeeper.registry import (IDS_PATH, RILL_BROKERS_PATH, RILL_TOPICS_PATH, TOPICS_PATH,
                                            encode_partition_map, parse_partition_map)
from rill.client.zookeeper.wake_loop import run_when_woken

log = structlog.get_logger(__name__)



class ZkRegistrationError(RuntimeError):
    """The broker could not register in ZooKeeper at start-up."""


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` -> (``"h1:2181,h2:2181"``, ``"/chroot"``); no chroot -> ``""``."""
    hosts, slash, chroot = connect.partition("/")
    chroot = ("/" + chroot).rstrip("/") if slash else ""
    return hosts, chroot


class ZkRegistration:
    """One broker's ephemeral registration in ZooKeeper, kept across session expiry."""

    def __init__(self, connect: str, broker_id: int, host: str, port: int,
                 topics: Callable[[], Mapping[str, int]], *, grpc_port: int = 0, grpc_tls_port: int = -1,
                 session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                 endpoints: Mapping[str, tuple[str, int, int]] | None = None) -> None:
        self.connect = connect
        self.grpc_tls_port = grpc_tls_port  # -1: none (a broker without grpc.ssl.port)
        self.endpoints = dict(endpoints or {})  # listener name -> advertised (host, port, gRPC port)
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.grpc_port = grpc_port
        self.topics = topics
        self.session_timeout_s = session_timeout_ms / 1000
        self.connection_timeout_s = connection_timeout_ms / 1000
        self.zk = KazooClient(hosts=connect, timeout=self.session_timeout_s)
        self.creator = ""
        self._session: int | None = None  # the session everything below was registered with
        self._own_sessions: set[int] = set()  # every session this broker has registered with
        self._registered: dict[str, int] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def id_path(self) -> str:
        return f"{IDS_PATH}/{self.broker_id}"

    @property
    def rill_path(self) -> str:
        return f"{RILL_BROKERS_PATH}/{self.broker_id}"

    def topic_path(self, topic: str) -> str:
        return f"{TOPICS_PATH}/{topic}/{self.broker_id}"

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Connect and register the id and every topic; raises ZkRegistrationError."""
        hosts, chroot = split_connect(self.connect)
        try:
            if chroot:
                self._ensure_chroot(hosts, chroot)
            self.zk.start(timeout=self.connection_timeout_s)
        except (KazooTimeoutError, KazooException) as exc:
            self.zk.close()
            raise ZkRegistrationError(
                f"cannot connect to ZooKeeper at {self.connect} within "
                f"{self.connection_timeout_s:g}s (zookeeper.connection.timeout.ms): "
                f"{exc or type(exc).__name__}") from exc
        try:
            self._register_all(startup=True)
        except BaseException:
            self.zk.stop()
            self.zk.close()
            raise
        self.zk.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="rill-zookeeper", daemon=True)
        self._thread.start()
        log.info("zookeeper.registered", connect=self.connect, broker_id=self.broker_id, path=self.id_path,
                 value=self._broker_value(), topics=len(self._registered), session=hex(self._session or 0))

    def topics_changed(self) -> None:
        """A topic was created: publish it (from the worker thread; never blocks)."""
        self._wake.set()

    def close(self) -> None:
        """Stop the worker and end the session (ZooKeeper removes our ephemerals). Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            self.zk.stop()
        finally:
            self.zk.close()
        log.info("zookeeper.closed", broker_id=self.broker_id)

    # -- worker -----------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            log.warning("zookeeper.session_lost", broker_id=self.broker_id)
        elif state == KazooState.SUSPENDED:
            log.warning("zookeeper.disconnected", broker_id=self.broker_id)
        self._wake.set()

    def _run(self) -> None:
        run_when_woken(self._stopping, self._wake, self._sync, failed="zookeeper.sync_failed", broker_id=self.broker_id)

    def _sync(self) -> None:
        if self.zk.state != KazooState.CONNECTED:
            return  # woken again when the state changes
        session = self._current_session()
        if session != self._session:
            log.info("zookeeper.reregistering", broker_id=self.broker_id,
                     old_session=hex(self._session or 0), session=hex(session))
            self._register_all(startup=False)
            log.info("zookeeper.registered", connect=self.connect, broker_id=self.broker_id, path=self.id_path,
                     value=self._broker_value(), topics=len(self._registered), session=hex(session))
            return
        self._register_topics()

    # -- ZooKeeper writes -----------------------------------------------------------------

    def _current_session(self) -> int:
        return int(self.zk.client_id[0])

    def _broker_value(self) -> str:
        return f"{self.creator}:{self.host}:{self.port}"

    def _register_all(self, startup: bool) -> None:
        session = self._current_session()
        self.creator = f"{self.host}-{int(time.time() * 1000)}"
        self._registered = {}
        self._create_ephemeral(self.id_path, self._broker_value().encode(), session, startup=startup)
        self._session = session
        self._own_sessions.add(session)
        rill_value = json.dumps({"host": self.host, "port": self.port, "grpc_port": self.grpc_port,
                                 "grpc_tls_port": self.grpc_tls_port,
                                 "endpoints": {name: {"host": host, "port": port, "grpc_port": grpc_port}
                                               for name, (host, port, grpc_port) in sorted(self.endpoints.items())}})
        self._create_ephemeral(self.rill_path, rill_value.encode(), session, startup=False)
        self._register_topics()

    def _register_topics(self) -> None:
        session = self._session
        assert session is not None
        current = self.topics()
        for topic in sorted(set(self._registered) - set(current)):
            self._unregister_topic(topic)
        for topic, count in sorted(current.items()):
            if self._registered.get(topic) == count:
                continue
            self._extend_partition_map(topic, count)
            self._create_ephemeral(self.topic_path(topic), str(count).encode(), session, startup=False)
            self._registered[topic] = count
            log.info("zookeeper.topic_registered", broker_id=self.broker_id, topic=topic, partitions=count)

    def _unregister_topic(self, topic: str) -> None:
        """A 0.7-style topic deleted here (Admin DeleteTopic): remove our node of it; once no broker lists the
        topic, also its parent and its partition map (a broker that holds it and is down appends anew)."""
        self._registered.pop(topic, None)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(self.topic_path(topic))
        log.info("zookeeper.topic_unregistered", broker_id=self.broker_id, topic=topic)
        try:
            if self.zk.get_children(f"{TOPICS_PATH}/{topic}"):
                return
            self.zk.delete(f"{TOPICS_PATH}/{topic}")
            data, stat = self.zk.get(f"{RILL_TOPICS_PATH}/{topic}")
            parse_partition_map(data)  # never a replicated topic's node
            self.zk.delete(f"{RILL_TOPICS_PATH}/{topic}", version=stat.version)
            log.info("zookeeper.partition_map_deleted", topic=topic)
        except (NoNodeError, NotEmptyError, BadVersionError, ValueError):
            pass  # another broker holds it (again), or it is gone already

    def _create_ephemeral(self, path: str, value: bytes, session: int, *, startup: bool) -> None:
        """Create ``path`` as our ephemeral with ``value``, coping with a node left by another session.

        At start-up a node owned by another session is waited for (it may be a dead
        predecessor's) for one session timeout, then is an error; later it is waited for
        as long as it takes (logged), unless its owner was an earlier session of ours,
        in which case it is deleted.
        """
        self._ensure_parents(path)
        deadline = time.monotonic() + self.session_timeout_s + 1.0
        warned = False
        while True:
            held = create_or_adopt(self.zk, path, value, session)
            if held is None:
                return
            owner, data = held.owner, held.data
            if owner in self._own_sessions:
                log.info("zookeeper.stale_node_deleted", path=path, owner=hex(owner))
                try:
                    self.zk.delete(path, version=held.version)
                except NoNodeError:
                    pass
                continue
            if startup and time.monotonic() >= deadline:
                raise ZkRegistrationError(
                    f"broker id {self.broker_id} is already registered in ZooKeeper ({self.connect}{path} = "
                    f"{data.decode(errors='replace')!r}, session {owner:#x}) by another live broker; "
                    "give each broker its own broker.id")
            if not warned:
                log.warning("zookeeper.node_held_by_other_session", path=path, owner=hex(owner),
                            value=data.decode(errors="replace"), waiting_s=self.session_timeout_s if startup else None)
                warned = True
            if self._stopping.wait(0.2):
                raise KazooException("stopping")

    def _extend_partition_map(self, topic: str, count: int) -> None:
        """Append this broker's partitions of ``topic`` missing from its map (compare-and-set)."""
        path = f"{RILL_TOPICS_PATH}/{topic}"
        mine = [(self.broker_id, p) for p in range(count)]
        while True:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                self._ensure_parents(path)
                try:
                    self.zk.create(path, encode_partition_map(mine))
                    return
                except NodeExistsError:
                    continue
            try:
                entries = list(parse_partition_map(data))
            except ValueError as exc:
                log.error("zookeeper.partition_map_unreadable", path=path, error=str(exc))
                return  # never overwrite a map we cannot read: numbers in it may be in use
            missing = [bp for bp in mine if bp not in set(entries)]
            if not missing:
                return
            try:
                self.zk.set(path, encode_partition_map(entries + missing), version=stat.version)
                log.info("zookeeper.partition_map_extended", topic=topic, first=len(entries), added=len(missing))
                return
            except BadVersionError:
                continue  # another broker appended meanwhile: read again

    def _ensure_parents(self, path: str) -> None:
        """Create the missing ancestors of ``path``, each holding the creator id (seed 004)."""
        parts = path.strip("/").split("/")[:-1]
        prefix = ""
        for part in parts:
            prefix += "/" + part
            if self.zk.exists(prefix) is None:
                try:
                    self.zk.create(prefix, self.creator.encode())
                except NodeExistsError:
                    pass

    def _ensure_chroot(self, hosts: str, chroot: str) -> None:
        """The chroot must exist before a chrooted session can create anything under it."""
        root = KazooClient(hosts=hosts, timeout=self.session_timeout_s)
        root.start(timeout=self.connection_timeout_s)
        try:
            root.ensure_path(chroot)
        finally:
            root.stop()
            root.close()


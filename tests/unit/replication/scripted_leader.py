"""A scripted leader for the replica fetcher tests: REPLICA_FETCH over real TCP, answered from real logs.

The broker's own REPLICA_FETCH handler is written elsewhere; this one answers as the
protocol says (docs/protocol.md, REPLICA_FETCH) from a real :class:`Log` and its
leader-epoch cache per partition, with switches for the failures a follower meets:
``mode`` "serve", "not_leader" (every block NotLeaderForPartition), "close" (the
connection is closed on each request), "corrupt" (one byte of the data flipped);
``hold`` (each request from number ``hold_from`` on waits until released); ``high_watermark`` (a fixed value;
None: that of a two-replica ISR, ``min(leader end, follower's fetch offset)``).
:meth:`stop` closes the listener and every connection; :meth:`start` listens again
on the same port.

Thread-safety: the test thread changes switches and appends under ``cond``; one
thread accepts and one serves each connection.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

from rill.broker.log.log import Log
from rill.broker.replication.divergence import epoch_span, leader_divergence
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.protocol.replica_fetch import (NO_EPOCH, ReplicaFetchBlock, ReplicaFetchPartition,
                                                ReplicaFetchRequest, replica_fetch_response_parts)
from rill.client.structs import Address, TopicPartition

HOLD_LIMIT_S = 10.0  # a held request is answered after this at the latest


class _Bytes:
    """Message bytes standing where the broker puts a file slice."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def length(self) -> int:
        return len(self.data)


class ScriptedLeader:
    """Leads ``logs`` (each with a leader-epoch cache) in leader epoch ``epoch`` on 127.0.0.1."""

    def __init__(self, logs: dict[TopicPartition, Log], epoch: int) -> None:
        self.logs = logs
        self.epoch = epoch
        self.mode = "serve"
        self.hold = False
        self.hold_from = 0
        self.high_watermark: int | None = None
        self.requests: list[tuple[float, ReplicaFetchRequest]] = []
        self.accepted: list[float] = []
        self.held = 0  # requests waiting on ``hold`` now
        self.cond = threading.Condition()
        self._auto_hw: dict[TopicPartition, int] = {}
        self._port = 0
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self.start()

    @property
    def address(self) -> Address:
        return ("127.0.0.1", self._port)

    # -- the test's side ------------------------------------------------------------------------

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self._port))
        listener.listen()
        listener.settimeout(0.05)
        self._port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self.cond:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
            self.cond.notify_all()
        if listener is not None:
            listener.close()
        for sock in connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def append(self, tp: TopicPartition, payloads: list[bytes], epoch: int | None = None) -> int:
        """Append ``payloads`` as one set, starting ``epoch`` there first if given; return the log end."""
        with self.cond:
            log = self.logs[tp]
            if epoch is not None:
                assert log.leader_epochs is not None
                log.leader_epochs.assign(epoch, log.end_offset)
            log.append(encode_message_set(payloads))
            self.cond.notify_all()
            return log.end_offset

    def release(self) -> None:
        with self.cond:
            self.hold = False
            self.cond.notify_all()

    def requests_for(self, tp: TopicPartition) -> list[ReplicaFetchPartition]:
        with self.cond:
            return [p for _, r in self.requests for p in r.partitions if (p.topic, p.partition) == tp]

    # -- the server's side ----------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                sock, _ = listener.accept()
            except (socket.timeout, OSError):
                continue
            sock.settimeout(None)
            with self.cond:
                self.accepted.append(time.monotonic())
                self._connections.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            while (body := _read_frame(sock)) is not None:
                kind, request = rq.decode_request(memoryview(body))
                assert kind == rq.RequestType.REPLICA_FETCH and isinstance(request, ReplicaFetchRequest)
                with self.cond:
                    self.requests.append((time.monotonic(), request))
                    self.cond.notify_all()
                    if self.mode == "close":
                        return
                    if len(self.requests) > self.hold_from:
                        self._wait_while_held()
                try:
                    sock.sendall(self._answer(request))
                except OSError:
                    return

    def _wait_while_held(self) -> None:
        self.held += 1
        deadline = time.monotonic() + HOLD_LIMIT_S
        while self.hold and self._listener is not None and time.monotonic() < deadline:
            self.cond.wait(deadline - time.monotonic())
        self.held -= 1

    def _answer(self, request: ReplicaFetchRequest) -> bytes:
        deadline = time.monotonic() + request.max_wait_ms / 1000
        with self.cond:
            while True:
                blocks = [self._block(p) for p in request.partitions]
                waiting = all(not b.error and b.diverging_epoch == NO_EPOCH and not data for b, data in blocks)
                if not waiting or time.monotonic() >= deadline or self._listener is None:
                    break
                self.cond.wait(deadline - time.monotonic())
        return b"".join(p.data if isinstance(p, _Bytes) else p for p in replica_fetch_response_parts(blocks))

    def _block(self, p: ReplicaFetchPartition) -> tuple[ReplicaFetchBlock, _Bytes | None]:
        tp = TopicPartition(p.topic, p.partition)
        log = self.logs.get(tp)
        if log is None or self.mode == "not_leader":
            code = ErrorCode.UNKNOWN_TOPIC if log is None else ErrorCode.NOT_LEADER_FOR_PARTITION
            return _error(code, 0, 0), None
        if p.current_leader_epoch != self.epoch:
            code = ErrorCode.FENCED_LEADER_EPOCH if p.current_leader_epoch < self.epoch else \
                ErrorCode.UNKNOWN_LEADER_EPOCH
            return _error(code, 0, log.start_offset), None
        cache, end = log.leader_epochs, log.end_offset
        assert cache is not None
        hw = self._high_watermark(tp, log, p.fetch_offset)
        if not log.start_offset <= p.fetch_offset <= end:
            return _error(ErrorCode.OFFSET_OUT_OF_RANGE, hw, log.start_offset), None
        diverging = leader_divergence(cache, p.last_fetched_epoch, p.fetch_offset, end)
        if diverging is not None:
            return ReplicaFetchBlock(0, hw, log.start_offset, NO_EPOCH, diverging.epoch, diverging.end_offset,
                                     memoryview(b"")), None
        span = epoch_span(cache.entries(), p.fetch_offset, end)
        data = _read(log, p.fetch_offset, min(p.max_bytes, span.end_offset - p.fetch_offset))
        if data and self.mode == "corrupt":
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        return ReplicaFetchBlock(0, hw, log.start_offset, span.epoch if data else NO_EPOCH, NO_EPOCH, -1,
                                 memoryview(b"")), _Bytes(data)

    def _high_watermark(self, tp: TopicPartition, log: Log, fetch_offset: int) -> int:
        if self.high_watermark is not None:
            return self.high_watermark
        hw = max(self._auto_hw.get(tp, 0), min(log.end_offset, fetch_offset))
        self._auto_hw[tp] = hw
        return hw


def _error(code: int, hw: int, start: int) -> ReplicaFetchBlock:
    return ReplicaFetchBlock(code, hw, start, NO_EPOCH, NO_EPOCH, -1, memoryview(b""))


def _read(log: Log, offset: int, max_size: int) -> bytes:
    if max_size <= 0:
        return b""
    piece = log.read(offset, max_size)
    if not piece.length or piece.file is None:
        return b""
    return os.pread(piece.file.fileno(), piece.length, piece.position)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    return _recv_exact(sock, struct.unpack(">i", head)[0])


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        try:
            chunk = sock.recv(n)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def log_bytes(log: Log) -> bytes:
    """Every byte of ``log`` from its start to its end, read through the log (whole messages)."""
    out, offset = [], log.start_offset
    while offset < log.end_offset:
        piece = _read(log, offset, log.end_offset - offset)
        assert piece, f"no progress reading {log.topic}-{log.partition} at {offset}"
        out.append(piece)
        offset += len(piece)
    return b"".join(out)

"""Fetching the owned partitions: one thread and one SimpleConsumer per broker (0.7's FetcherRunnable).

Each ``BrokerFetcher`` long-polls its broker for all the partitions it was given
(one multi-fetch per round, rill's long-poll request, ``fetch.wait.max.ms``) and
hands every non-empty result to the ``StreamBuffers`` as a chunk tagged with the
generation it was started for; the buffers drop it if that generation is over.

- A partition that starts with no offset (nothing in ZooKeeper) begins at the
  earliest or latest offset of the log (``autooffset.reset``), and that start is
  recorded as the consumed offset, so it gets committed.
- OffsetOutOfRange resets the fetch position the same way (logged as a warning, as
  0.7 did).
- A broker that cannot be reached is retried with a growing backoff (up to 2 s); the
  partitions stay owned until a rebalance moves them (a dead broker's id node
  vanishing triggers one). A replicated partition is fetched from its leader; a
  broker that does not lead it (yet, or any more) answers NotLeaderForPartition,
  retried the same way (a fetch's, per partition, after ``fetch.wait.max.ms``) until
  the new leader's state node restarts the fetchers (rill.client.zookeeper.replicated_view).
- A corrupt message, or one larger than the fetch size limit, is reported to the
  application through the buffers (raised by the next poll or stream read).
- Each fetcher connects to its broker's listener of the consumer's
  ``security.protocol`` (the address the broker registered for it in ``/rill/brokers``)
  with TLS and SASL as the security settings say. A refused handshake or login
  (AuthenticationFailed: wrong password, untrusted certificate) is reported the same
  way, so ``poll()`` raises it instead of waiting in silence, and retried every 2 s
  (an operator may add the user meanwhile).

``FetcherPool.stop`` ends every thread and waits for them: at most one fetch wait
plus one request later.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import NamedTuple

import structlog

from rill.client.errors import (AuthenticationFailed, BrokerError, ConnectionClosed, CorruptMessageError,
                                InvalidFetchSize, OffsetOutOfRange)
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError
from rill.client.security.client_security import ClientSecurity
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, FetchResult, SimpleConsumer
from rill.client.zookeeper.registry import BrokerRegistration, client_listener
from rill.client.zookeeper.streams import Chunk, PartitionKey, StreamBuffers, ZkRecord

__all__ = ["FetchConfig", "FetchTarget", "FetcherPool"]

log = structlog.get_logger(__name__)

MAX_BACKOFF_S = 2.0


class FetchConfig(NamedTuple):
    fetch_size: int
    max_wait_ms: int
    reset_to_smallest: bool
    socket_timeout_s: float
    security: ClientSecurity | None = None
    """TLS and SASL of every broker connection (None: PLAINTEXT)."""

    @property
    def listener(self) -> str:
        """The brokers' listener the fetchers connect to (``security.protocol``)."""
        return client_listener(self.security)


class FetchTarget(NamedTuple):
    """A partition to fetch and where to start (None: resolve by ``autooffset.reset``)."""

    key: PartitionKey
    offset: int | None


class BrokerFetcher:
    """One thread fetching a set of partitions from one broker for one generation."""

    def __init__(self, broker: BrokerRegistration, targets: list[FetchTarget], generation: int,
                 buffers: StreamBuffers, config: FetchConfig) -> None:
        self.broker = broker
        self.generation = generation
        self.buffers = buffers
        self.config = config
        self.positions: dict[PartitionKey, int | None] = {t.key: t.offset for t in targets}
        self.stopping = threading.Event()
        self.host, self.port, _ = broker.address_for(config.listener)
        self.thread = threading.Thread(target=self._run, name=f"rill-zk-fetcher-{broker.broker_id}", daemon=True)
        self.log = log.bind(broker_id=broker.broker_id, broker=f"{self.host}:{self.port}", generation=generation)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        listener = self.config.listener
        if listener != "PLAINTEXT" and not self.broker.lists(listener):
            self.log.warning("zookeeper_consumer.listener_not_registered", listener=listener,
                             note="the broker registered no such listener: trying its registered address")
        client = SimpleConsumer(self.host, self.port, max_fetch_size=self.config.fetch_size,
                                fetch_size_limit=max(self.config.fetch_size, DEFAULT_FETCH_SIZE_LIMIT),
                                timeout=self.config.socket_timeout_s, security=self.config.security)
        failures = 0
        try:
            while not self.stopping.is_set():
                try:
                    self._round(client)
                    failures = 0
                except (CorruptMessageError, InvalidFetchSize) as exc:
                    self.log.error("zookeeper_consumer.fetch_error", error=str(exc))
                    self.buffers.fail(exc)
                    self.stopping.wait(MAX_BACKOFF_S)
                except AuthenticationFailed as exc:  # the same settings fail the same way: say so, slowly
                    self.log.error("zookeeper_consumer.authentication_failed", listener=listener, error=str(exc))
                    self.buffers.fail(exc)
                    client.close()
                    self.stopping.wait(MAX_BACKOFF_S)
                except (ConnectionClosed, OSError, DecodeError, BrokerError) as exc:
                    if isinstance(exc, BrokerError) and not exc.retriable:
                        raise
                    failures += 1  # unreachable, or not (yet) the leader of a replicated partition
                    self.log.warning("zookeeper_consumer.fetch_failed", error=repr(exc), failures=failures)
                    self.stopping.wait(min(MAX_BACKOFF_S, 0.05 * 2 ** failures))
        except Exception:
            self.log.exception("zookeeper_consumer.fetcher_crashed")
        finally:
            client.close()

    def _round(self, client: SimpleConsumer) -> None:
        for key, offset in list(self.positions.items()):
            if offset is None:
                start = self._reset_offset(client, key)
                self.positions[key] = start
                self.buffers.start_offset(self.generation, key, start)
        keys = list(self.positions)
        requests = [rq.FetchRequest(k.topic, k.partition, self.positions[k] or 0, self.config.fetch_size)
                    for k in keys]
        results = client.fetch_wait(requests, self.config.max_wait_ms, 1)
        errors = 0
        for key, result in zip(keys, results):
            if self.stopping.is_set():
                return
            if result.error is not None:
                errors += 1
                self._on_error(client, key, result)
                continue
            if result.messages:
                records = [ZkRecord(m.topic, key.broker_id, m.partition, m.offset, m.next_offset, m.value, m.key)
                           for m in result.messages]
                if not self.buffers.put(Chunk(self.generation, key, records), self.stopping.is_set):
                    return
            self.positions[key] = result.next_offset
        if errors and errors == len(keys):
            self.stopping.wait(self.config.max_wait_ms / 1000 or 0.1)  # nothing but errors: do not spin

    def _on_error(self, client: SimpleConsumer, key: PartitionKey, result: FetchResult) -> None:
        error = result.error
        if isinstance(error, OffsetOutOfRange):
            offset = self._reset_offset(client, key)
            self.log.warning("zookeeper_consumer.offset_out_of_range", topic=key.topic, partition=key.name,
                             offset=result.offset, reset_to=offset)
            self.positions[key] = offset
            return
        retriable = isinstance(error, BrokerError) and error.retriable
        self.log.warning("zookeeper_consumer.partition_fetch_error", topic=key.topic, partition=key.name,
                         offset=result.offset, error=str(error), retriable=retriable)

    def _reset_offset(self, client: SimpleConsumer, key: PartitionKey) -> int:
        if self.config.reset_to_smallest:
            return client.earliest_offset(key.topic, key.partition)
        return client.latest_offset(key.topic, key.partition)


class FetcherPool:
    """The fetchers of the current generation, one per broker."""

    def __init__(self, buffers: StreamBuffers, config: FetchConfig) -> None:
        self.buffers = buffers
        self.config = config
        self._fetchers: list[BrokerFetcher] = []

    def start(self, generation: int, targets: Mapping[BrokerRegistration, list[FetchTarget]]) -> None:
        """Start one fetcher per broker that has partitions to fetch (stops earlier ones first)."""
        self.stop()
        for broker, partitions in sorted(targets.items()):
            if partitions:
                fetcher = BrokerFetcher(broker, partitions, generation, self.buffers, self.config)
                self._fetchers.append(fetcher)
                fetcher.start()

    def signal_stop(self) -> None:
        """Ask every fetcher to stop (never blocks)."""
        for fetcher in self._fetchers:
            fetcher.stopping.set()
        self.buffers.wake()

    def stop(self) -> None:
        """Stop every fetcher and wait for it to end."""
        self.signal_stop()
        for fetcher in self._fetchers:
            if fetcher.thread is not threading.current_thread():
                fetcher.thread.join(timeout=self.config.socket_timeout_s + self.config.max_wait_ms / 1000 + 1)
                if fetcher.thread.is_alive():
                    fetcher.log.warning("zookeeper_consumer.fetcher_did_not_stop")
        self._fetchers = []

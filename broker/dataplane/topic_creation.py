"""Creating topics from the data plane without blocking the event loop.

Directories are made on the log manager's creator thread (rill.broker.log.creator),
never on the event loop. So:

* CREATE_TOPIC is checked at once (name, ``num.partitions.max``,
  ``max.broker.partitions``: an error answers at once) and answered through a slot
  filled when the creator has published the topic; other requests on the connection
  go on meanwhile, and their answers keep their order behind it.
* A produce to a topic that does not exist (``auto.create.topics.enable``) starts its
  creation and raises :class:`~rill.broker.dataplane.server_connection.Deferred`: that connection reads
  nothing more until the topic exists, then the produce is handled again. A creation
  that failed is reported for that topic's partitions (it is not retried for the
  same request). Other connections are served throughout.

In a cluster whose ``default.replication.factor`` is not 1 (a :class:`ReplicatedCreation`
is attached), both make a *replicated* topic in ZooKeeper instead, on the creator's
worker thread (rill.broker.cluster.replicated_topic_creator), unless the name is a
0.7-style topic here or elsewhere in the cluster (name and count, 1 .. 3,000, are
checked at once). CREATE_TOPIC is answered once ZooKeeper holds the topic. A produce
waits likewise; then, as long as the controller has not told this broker the topic's
leaders, its partitions of that topic are refused with
:class:`~rill.client.errors.LeaderNotAvailable` (retriable, nothing written anywhere:
the client retries with fresh metadata, as Kafka answers a freshly auto-created
topic). So is a produce to any replicated topic whose leaders this broker has not
heard yet.

Everything here runs on the event-loop thread; completions come back through
``server.call_soon_threadsafe``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Protocol

from rill.broker.dataplane.server_connection import Connection, Deferred, Slot
from rill.broker.dataplane.storage import Loop, PartitionStore
from rill.client.errors import (BrokerError, LeaderNotAvailable, PartitionLimitReached, StorageError,
                                TopicAuthorizationFailed)
from rill.client.protocol import requests as rq
from rill.client.topic_names import is_valid_topic, is_internal_topic, refuse_internal


_NONE: dict[str, BrokerError] = {}


def as_broker_error(topic: str, exc: BaseException) -> BrokerError:
    """The error to answer for a creation of ``topic`` that failed with ``exc``."""
    if isinstance(exc, BrokerError):
        return exc
    detail = getattr(exc, "strerror", None) or str(exc)
    where = getattr(exc, "filename", None)
    return StorageError(f"creating topic {topic!r} failed: {detail}" + (f": {where}" if where else ""))


class ReplicatedNames(Protocol):
    """Replicated topics as this broker knows them (rill.broker.replication.replica_manager.ReplicaManager)."""

    def holds_topic(self, topic: str) -> bool:
        """Whether the name is a replicated topic (from the controller or ZooKeeper's registry)."""
        ...

    def placement(self, topic: str) -> tuple[int, ...] | None:
        """Its partitions' leaders as the controller told this broker; None before it has."""
        ...


class ReplicatedCreation(Protocol):
    """Creates replicated topics off the loop (rill.broker.cluster.replicated_topic_creator)."""

    def creates(self, topic: str) -> bool:
        """Whether an unknown ``topic`` is to be replicated (False: a 0.7-style topic elsewhere)."""
        ...

    def create_async(self, topic: str, partitions: int) -> Future[int]: ...

    def ensure_async(self, topic: str) -> Future[int]: ...


def _no_leader_yet(topic: str) -> LeaderNotAvailable:
    return LeaderNotAvailable(f"topic {topic!r} is a new replicated topic: its leaders are not known here yet")


class DataPlaneTopics:
    """CREATE_TOPIC and auto-creation for the request handlers.

    ``replicas``: the replicated topics (never auto-created as 0.7 topics); None: there are
    none. :attr:`replicated_creation` is set once the broker has joined a cluster whose
    ``default.replication.factor`` is not 1.
    """

    def __init__(self, server: Loop, logs: PartitionStore, auto_create: bool, *,
                 replicas: ReplicatedNames | None = None) -> None:
        self.server = server
        self.logs = logs
        self.auto_create = auto_create
        self.replicas = replicas
        self.replicated_creation: ReplicatedCreation | None = None
        self.may_create: Callable[[Connection, str], bool] | None = None
        """With the authorizer: whether a connection may create a topic (Create on the cluster or the topic)."""
        self.reserve_partitions: Callable[[str, int], str | None] | None = None
        """The partition cap (partitions_created_max): counts a principal's new partitions, or says why not."""
        self.auto_partitions = 1  # how many partitions an auto-created topic gets (num.partitions)

    def _leaders_known(self, topic: str) -> bool:
        """Whether the controller has told this broker the leaders of replicated ``topic``."""
        return self.replicas is not None and self.replicas.placement(topic) is not None

    def _replicating(self, topic: str) -> ReplicatedCreation | None:
        """The creator if creating ``topic`` here makes a replicated topic; None: a 0.7-style one."""
        creation = self.replicated_creation
        if creation is None or topic in self.logs.topics() or not creation.creates(topic):
            return None
        return creation

    def create_topic(self, conn: Connection, req: rq.CreateTopicRequest) -> Slot:
        """Answer CREATE_TOPIC: at once for an error or an existing topic, else once it is published."""
        try:
            refuse_internal(req.topic)
            if self.reserve_partitions is not None and req.topic not in self.logs.topics():
                refusal = self.reserve_partitions(conn.principal, req.partitions)
                if refusal is not None:
                    raise PartitionLimitReached(refusal)
            creation = self._replicating(req.topic)
            future = (creation.create_async(req.topic, req.partitions) if creation is not None
                      else self.logs.create_topic_async(req.topic, req.partitions))
        except BrokerError as exc:
            return Slot([rq.encode_create_topic_response(int(exc.code), self.logs.topics().get(req.topic, 0))])
        if future.done():
            return Slot([self._answer(req.topic, future)])
        slot = Slot()
        future.add_done_callback(
            lambda _: self.server.call_soon_threadsafe(lambda: self._fill(conn, slot, req.topic, future)))
        return slot

    def _fill(self, conn: Connection, slot: Slot, topic: str, future: Future[int]) -> None:
        slot.fill([self._answer(topic, future)])
        self.server.mark_dirty(conn)

    def _answer(self, topic: str, future: Future[int]) -> bytes:
        exc = future.exception()
        if exc is not None:
            return rq.encode_create_topic_response(int(as_broker_error(topic, exc).code), 0)
        return rq.encode_create_topic_response(0, future.result())

    def ensure(self, conn: Connection, topics: Iterable[str]) -> dict[str, BrokerError]:
        """Make sure the produce's topics exist before anything is appended.

        Returns the topics whose partitions are to be refused, with the error to answer
        for them: those that cannot be created, and new replicated topics
        (LeaderNotAvailable). An invalid name or an unknown topic is left to the append,
        which reports it.

        Raises:
            Deferred: a topic is being created; the request is handled again once it is.
        """
        if not self.auto_create:
            return _NONE
        known = self.logs.topics()
        missing = sorted({topic for topic in topics
                          if topic not in known and is_valid_topic(topic) and not is_internal_topic(topic)})
        if not missing:
            return _NONE  # the usual case: every topic exists
        waited = {d.key: d.future for d in conn.deferrals}  # each done
        errors: dict[str, BrokerError] = {}
        for topic in missing:
            error = self._ensure_one(conn, topic, waited.get(topic))
            if error is not None:
                errors[topic] = error
        return errors

    def _ensure_one(self, conn: Connection, topic: str, waited: Future[int] | None) -> BrokerError | None:
        """The error to refuse ``topic``'s partitions with, or None (created, or left to the append).

        ``waited``: the creation this request already waited for (done), if any.

        Raises:
            Deferred: the topic is being created.
        """
        if waited is not None:  # answer, never create again for this request
            failure = waited.exception()
            if failure is not None:
                return as_broker_error(topic, failure)
            # a 0.7-style topic created is known now, so one still missing is a replicated topic
            return None if self._leaders_known(topic) else _no_leader_yet(topic)
        if self.replicas is not None and self.replicas.holds_topic(topic):  # never create a replicated name
            clustered = self.replicated_creation is not None
            return _no_leader_yet(topic) if clustered and not self._leaders_known(topic) else None
        if self.may_create is not None and not self.may_create(conn, topic):
            return TopicAuthorizationFailed(f"{conn.principal} may not Create topic {topic!r}")
        refusal = self.reserve_partitions(conn.principal, self.auto_partitions) if self.reserve_partitions else None
        if refusal is not None:
            return PartitionLimitReached(refusal)
        creation = self._replicating(topic)
        try:
            future = creation.ensure_async(topic) if creation is not None else self.logs.ensure_topic_async(topic)
        except BrokerError as exc:
            return exc
        if not future.done() or future.exception() is not None:
            raise Deferred(future, topic)  # a failure is answered on the retry (it is in conn.deferrals)
        return _no_leader_yet(topic) if creation is not None else None

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

Everything here runs on the event-loop thread; completions come back through
``server.call_soon_threadsafe``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from rill.broker.dataplane.server_connection import Connection, Deferred, Slot
from rill.broker.dataplane.storage import Loop, PartitionStore
from rill.client.errors import BrokerError, StorageError
from rill.client.protocol import requests as rq
from rill.client.topic_names import is_valid_topic


_NONE: dict[str, BrokerError] = {}


def as_broker_error(topic: str, exc: BaseException) -> BrokerError:
    """The error to answer for a creation of ``topic`` that failed with ``exc``."""
    if isinstance(exc, BrokerError):
        return exc
    detail = getattr(exc, "strerror", None) or str(exc)
    where = getattr(exc, "filename", None)
    return StorageError(f"creating topic {topic!r} failed: {detail}" + (f": {where}" if where else ""))


class DataPlaneTopics:
    """CREATE_TOPIC and auto-creation for the request handlers."""

    def __init__(self, server: Loop, logs: PartitionStore, auto_create: bool, *,
                 replicated: Callable[[str], bool] | None = None) -> None:
        self.server = server
        self.logs = logs
        self.auto_create = auto_create
        self.replicated = replicated
        """Names of replicated topics (never auto-created as 0.7 topics); None: there are none."""

    def create_topic(self, conn: Connection, req: rq.CreateTopicRequest) -> Slot:
        """Answer CREATE_TOPIC: at once for an error or an existing topic, else once it is published."""
        try:
            future: Future[int] = self.logs.create_topic_async(req.topic, req.partitions)
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

        Returns the topics that cannot be created, with the error to answer for them
        (an invalid name or an unknown topic is left to the append, which reports it).

        Raises:
            Deferred: a topic is being created; the request is handled again once it is.
        """
        if not self.auto_create:
            return _NONE
        known = self.logs.topics()
        missing = [topic for topic in topics if topic not in known
                   and (self.replicated is None or not self.replicated(topic))]  # never create a replicated name
        if not missing:
            return _NONE  # the usual case: every topic exists
        errors: dict[str, BrokerError] = {}
        failed = {d.key: d.future.exception() for d in conn.deferrals if d.future.exception() is not None}
        for topic in sorted(set(missing)):
            if not is_valid_topic(topic):
                continue
            failure = failed.get(topic)
            if failure is not None:  # this request waited for it already: answer, never create again
                errors[topic] = as_broker_error(topic, failure)
                continue
            try:
                future = self.logs.ensure_topic_async(topic)
            except BrokerError as exc:
                errors[topic] = exc
                continue
            if not future.done() or future.exception() is not None:
                raise Deferred(future, topic)  # a failure is answered on the retry (it is in conn.deferrals)
        return errors

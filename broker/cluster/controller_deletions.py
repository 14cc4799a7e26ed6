"""The controller's topic deletion role: watching the markers, and driving each deletion to its end.

A mixin of :class:`~rill.broker.cluster.controller.Controller` (it uses its worker, its
ZooKeeper session, its ReplicaControl client and its timer); the steps and the writes
are topic_deletion.py's.

- The markers under ``/rill/admin/delete_topics`` are read with a children watch; the
  watch, and a timer every ``RETRY_INTERVAL_S`` while anything is pending, post
  :meth:`ControllerDeletions._advance_deletions` to the worker.
- A new controller takes the marked topics out of its context right after loading it
  (:meth:`ControllerDeletions._begin_deletions`, before its elections and its full
  LeaderAndIsr), so a topic being deleted is never given roles again, then carries
  every deletion on from step 3: resending the deletion roles is harmless (a broker
  that deleted its replica already only forgets the metadata again).
- A marker naming no replicated topic (a typo written by hand, a 0.7 partition map) is
  removed; one naming a replicated topic the controller has not loaded yet (created a
  moment ago) waits for it. A topic with a reassignment under way waits for it to end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient

from rill.broker.cluster.controller_core import ControllerCore
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import read_topic
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient
from rill.broker.cluster.topic_deletion import (RETRY_INTERVAL_S, begin_deletion, marked_topics, remove_topic_nodes,
                                                send_deletion, unmark, write_progress)
from rill.client.topic_names import is_valid_topic

__all__ = ["ControllerDeletions"]


class ControllerDeletions(ControllerCore):
    """Topic deletion for the Controller (module docstring). Uses the attributes and methods declared here."""

    zk: KazooClient
    broker_id: int
    client: ReplicaControlClient
    request_timeout_s: float
    log: Any
    _ctx: ControllerContext | None
    _closed: threading.Event
    _deletions_scheduled: bool = False
    _deletions_waiting: dict[str, str]  # marked topics not begun yet -> why (logged when it changes)


    # -- kazoo's thread -----------------------------------------------------------------------

    def _on_markers_watch(self, _event: Any) -> None:
        if not self._closed.is_set():
            self._post(self._advance_deletions)

    # -- the worker ---------------------------------------------------------------------------

    def _begin_deletions(self, ctx: ControllerContext) -> None:
        """On becoming the controller, after loading the topics: take the marked ones out of ``ctx`` (step 2);
        the sends follow on the worker once the full LeaderAndIsr is out."""
        self._deletions_waiting = {}
        self._take_marked(ctx, marked_topics(self.zk, watch=self._on_markers_watch))
        self._schedule_deletions(0.0)

    def _advance_deletions(self) -> None:
        """New markers begin; every deletion under way is sent to the brokers still waiting, and its nodes removed
        once none is. Runs again after RETRY_INTERVAL_S while anything is pending."""
        self._deletions_scheduled = False
        ctx = self._ctx
        if ctx is None:
            return
        pending = self._take_marked(ctx, marked_topics(self.zk, watch=self._on_markers_watch))
        for topic in sorted(ctx.deleting):
            started = time.monotonic()
            confirmed = send_deletion(self.client, ctx, self.broker_id, topic, self.request_timeout_s)
            deletion = ctx.deleting[topic]
            if confirmed and deletion.waiting:
                write_progress(self.zk, ctx, topic, deletion.confirmed)
            if deletion.waiting:
                if deletion.waiting != deletion.reported:
                    deletion.reported = frozenset(deletion.waiting)
                    self.log.info("controller.topic_deletion_waiting", topic=topic, brokers=sorted(deletion.waiting),
                                  confirmed=sorted(confirmed), live=sorted(ctx.live))
                continue
            if remove_topic_nodes(self.zk, ctx, topic):
                del ctx.deleting[topic]
                self.log.info("controller.topic_deleted", topic=topic, partitions=deletion.replicas.partitions,
                              epoch=ctx.epoch.epoch, ms=round((time.monotonic() - started) * 1000, 1))
        if pending or ctx.deleting:
            self._schedule_deletions(RETRY_INTERVAL_S)

    def _take_marked(self, ctx: ControllerContext, marked: Sequence[str]) -> bool:
        """Begin the deletion of each marked topic that can begin; True while some must wait."""
        waiting: dict[str, str] = {}
        for topic in marked:
            if topic in ctx.deleting:
                continue
            replicas = ctx.topics.get(topic)
            if replicas is None:
                if is_valid_topic(topic) and self._replicated_in_zookeeper(topic):
                    waiting[topic] = "not loaded yet"
                    continue
                unmark(self.zk, ctx, topic)
                self.log.warning("controller.deletion_marker_dropped", topic=topic,
                                 reason="no replicated topic of that name")
                continue
            if replicas.adding:
                waiting[topic] = "reassignment in progress"
                continue
            begin_deletion(self.zk, ctx, topic)
        for topic, why in waiting.items():
            if self._deletions_waiting.get(topic) != why:
                self.log.info("controller.topic_deletion_deferred", topic=topic, reason=why)
        self._deletions_waiting = waiting
        return bool(waiting)

    def _replicated_in_zookeeper(self, topic: str) -> bool:
        try:
            return read_topic(self.zk, topic) is not None
        except ValueError:
            return False

    def _schedule_deletions(self, delay_s: float) -> None:
        if not self._deletions_scheduled:
            self._deletions_scheduled = True
            self._later(delay_s, self._advance_deletions)

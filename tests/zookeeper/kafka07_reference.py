"""An independent, minimal model of Kafka 0.7's Scala ZookeeperConsumerConnector rebalance.

Written from Kafka 0.7's documented behaviour only (seed 000 5.6, seed 004 and the
facts of its source), sharing no code with rill.client.zookeeper, so that a test
putting it and ZkConsumers in one group checks that both divide partitions the same
way. It never fetches: it registers, watches, rebalances and owns, like the real
connector's ZKRebalancerListener:

- registers ``/consumers/[group]/ids/[group]_[uuid]`` (ephemeral) with the JSON 0.7
  writes, spaces included: ``{ "t": 2 }``;
- watches the children of ``/consumers/[group]/ids``, ``/brokers/ids`` and
  ``/brokers/topics/[topic]`` for each of its topics;
- rebalances: release own owner nodes; per topic, the thread ids
  ``<consumer id>-<i>`` of every member subscribed to it (``*n*regex`` and
  ``!n!regex`` members too) sorted as strings, the ``broker-partition`` names sorted
  as strings; position ``i`` gets ``n*i + min(i, extra)`` onwards, ``n + (i < extra)``
  of them; create each owner node (ephemeral, value = thread id); any conflict
  deletes the nodes just created and the whole rebalance is retried after a backoff,
  ``retries`` attempts in all (then it gives up until the next watch fires, as 0.7).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError


def reference_split(parts: list[str], threads: list[str]) -> dict[str, str]:
    """Partition -> thread for one topic, 0.7's way (both lists sorted here as strings)."""
    parts, threads = sorted(parts), sorted(threads)
    out: dict[str, str] = {}
    if not threads:
        return out
    n, extra = len(parts) // len(threads), len(parts) % len(threads)
    for i, thread in enumerate(threads):
        start = n * i + min(i, extra)
        for part in parts[start:start + n + (1 if i < extra else 0)]:
            out[part] = thread
    return out


def topics_of(value: bytes, all_topics: list[str]) -> dict[str, int]:
    """Topic -> streams of a member's registration (0.7's TopicCount.constructTopicCount)."""
    text = value.decode()
    m = re.match(r"^([*!])(\d+)\1(.*)$", text, re.DOTALL)
    if m:
        regex = m.group(3).strip().replace(",", "|").replace(" ", "").strip("\"'")
        white = m.group(1) == "*"
        return {t: int(m.group(2)) for t in all_topics if (re.fullmatch(regex, t) is not None) == white}
    return {str(k): int(v) for k, v in json.loads(text).items()}


class Kafka07Consumer:
    """One member of a group, behaving as Kafka 0.7's connector does towards ZooKeeper."""

    def __init__(self, hosts: str, group: str, uuid: str, topic_count: dict[str, int],
                 backoff_s: float = 0.2, retries: int = 4) -> None:
        self.group = group
        self.consumer_id = f"{group}_{uuid}"
        self.topic_count = topic_count
        self.backoff_s = backoff_s
        self.retries = retries
        self.owned: dict[tuple[str, str], str] = {}  # (topic, broker-partition) -> thread id
        self.lock = threading.Lock()
        self.rebalances = 0
        self.zk = KazooClient(hosts=hosts, timeout=5)
        self.zk.start(timeout=10)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._register()
        self._thread = threading.Thread(target=self._watcher_executor, daemon=True)
        self._thread.start()
        self._wake.set()

    @property
    def thread_ids(self) -> list[str]:
        return [f"{self.consumer_id}-{i}" for n in self.topic_count.values() for i in range(n)]

    def _register(self) -> None:
        value = "{ " + ", ".join(f'"{t}": {n}' for t, n in self.topic_count.items()) + " }"
        path = f"/consumers/{self.group}/ids/{self.consumer_id}"
        for prefix in ("/consumers", f"/consumers/{self.group}", f"/consumers/{self.group}/ids"):
            try:
                self.zk.create(prefix, self.consumer_id.encode())
            except NodeExistsError:
                pass
        self.zk.create(path, value.encode(), ephemeral=True)

    def _watch(self, _event: Any) -> None:
        self._wake.set()

    def _watcher_executor(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._synced_rebalance()
            except KazooException:
                if not self._stop.is_set():
                    self._stop.wait(self.backoff_s)
                    self._wake.set()

    def _synced_rebalance(self) -> None:
        for _ in range(self.retries):
            if self._stop.is_set() or self._rebalance():
                return
            self._stop.wait(self.backoff_s)

    def _rebalance(self) -> bool:
        zk, base = self.zk, f"/consumers/{self.group}"
        zk.get_children("/brokers/ids", watch=self._watch)
        all_topics = zk.get_children("/brokers/topics") if zk.exists("/brokers/topics") else []
        members = zk.get_children(f"{base}/ids", watch=self._watch)
        threads_per_topic: dict[str, list[str]] = {}
        for member in members:
            try:
                value = zk.get(f"{base}/ids/{member}")[0]
            except NoNodeError:
                continue
            for topic, n in topics_of(value, all_topics).items():
                threads_per_topic.setdefault(topic, []).extend(f"{member}-{i}" for i in range(n))
        with self.lock:
            self.rebalances += 1
            self._release()
            decision: dict[tuple[str, str], str] = {}
            for topic in self.topic_count:
                parts: list[str] = []
                if zk.exists(f"/brokers/topics/{topic}", watch=self._watch):
                    for broker in zk.get_children(f"/brokers/topics/{topic}", watch=self._watch):
                        try:
                            count = int(zk.get(f"/brokers/topics/{topic}/{broker}")[0])
                        except NoNodeError:
                            continue
                        parts.extend(f"{broker}-{p}" for p in range(count))
                split = reference_split(parts, threads_per_topic.get(topic, []))
                decision.update({(topic, part): thread for part, thread in split.items()
                                 if thread.startswith(self.consumer_id + "-")})
            created: list[tuple[str, str]] = []
            for (topic, part), thread in sorted(decision.items()):
                path = f"{base}/owners/{topic}/{part}"
                try:
                    zk.create(path, thread.encode(), ephemeral=True, makepath=True)
                    created.append((topic, part))
                except NodeExistsError:
                    for t, p in created:  # 0.7 deletes what it wrote and retries the whole rebalance
                        zk.delete(f"{base}/owners/{t}/{p}")
                    return False
            self.owned = decision
            return True

    def _release(self) -> None:
        for topic, part in self.owned:
            try:
                self.zk.delete(f"/consumers/{self.group}/owners/{topic}/{part}")
            except NoNodeError:
                pass
        self.owned = {}

    def close(self) -> None:
        """0.7's shutdown: stop, then close the session (its ephemerals vanish with it)."""
        self._stop.set()
        self._wake.set()
        self._thread.join(10)
        self.zk.stop()
        self.zk.close()

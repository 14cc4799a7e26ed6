"""The brokers page: each broker with its roles, and the ones that are gone.

- **Live brokers** come from METADATA (what every client sees); a broker METADATA named
  earlier and no longer names is listed as **down** (the console remembers every broker
  it has seen since it started: :meth:`ClusterAccess.seen_brokers`).
- **Leaders**: the partitions each broker leads (METADATA's leaders); a partition whose
  leader is not alive is **offline**.
- **Replicas**: the replicated partitions each broker holds a copy of (Admin DescribeTopics).
- **Groups coordinated**: ListGroups names each group's coordinator.
- **Controller**: the broker that elects leaders. Only the controller answers Admin
  ListPartitionReassignments; any other broker answers NOT_CONTROLLER naming it, so one
  such call (without following the redirect) and DescribeCluster (which names the broker
  answering) tell which broker it is. A single broker is its own controller.

Each role that cannot be learned (the ACLs refuse Describe on the cluster, say) is left
out with a note saying why; only METADATA failing makes the page an error.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import problem_of
from rill.client.errors import RillError
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol import requests as rq
from rill.v1 import coordinator_pb2 as pb

__all__ = ["BrokerRow", "BrokersView", "brokers_view"]


@dataclass(frozen=True)
class BrokerRow:
    """One broker: where it is, whether it is alive, and its roles (counts over what the console may see)."""

    broker_id: int
    host: str
    port: int                     # the Kafka 0.7 data plane
    grpc_port: int                # Admin and GroupCoordinator
    alive: bool                   # METADATA names it now
    last_seen: float              # when METADATA last named it (time.time())
    controller: bool
    leaders: int                  # partitions it leads
    replicas: int                 # replicated partitions it holds a copy of
    groups: tuple[str, ...]       # groups it coordinates


@dataclass(frozen=True)
class BrokersView:
    """The brokers page: brokers by id, the controller (None: not known, ``controller_note`` says why),
    partitions without a live leader, and notes on what could not be learned."""

    brokers: tuple[BrokerRow, ...]
    controller: int | None
    controller_note: str
    offline_partitions: int
    notes: tuple[str, ...]

    @property
    def down(self) -> tuple[BrokerRow, ...]:
        return tuple(b for b in self.brokers if not b.alive)


def brokers_view(access: ClusterAccess) -> BrokersView:
    """The brokers page as the cluster answers now.

    Raises:
        ConnectionClosed: no broker answered METADATA (the page shows that instead).
    """
    meta = access.metadata()
    live = {b.broker_id for b in meta.brokers}
    leaders = Counter(leader for t in meta.topics if not t.error for leader in t.leaders)
    notes: list[str] = []
    replicas = _replica_counts(access, notes)
    groups = _coordinated(access, notes)
    controller, controller_note = _controller(access)
    rows = []
    for broker_id, seen in sorted(access.seen_brokers().items()):
        b = seen.broker
        rows.append(BrokerRow(broker_id, b.host, b.port, b.grpc_port, broker_id in live, seen.last_seen,
                              broker_id == controller, leaders.get(broker_id, 0), replicas.get(broker_id, 0),
                              tuple(sorted(groups.get(broker_id, ())))))
    return BrokersView(tuple(rows), controller, controller_note, leaders.get(rq.NO_LEADER, 0), tuple(notes))


def _replica_counts(access: ClusterAccess, notes: list[str]) -> Counter[int]:
    try:
        topics = access.admin_call(lambda admin: admin.describe_topics()).topics
    except RillError as exc:
        notes.append(f"Replicas: {problem_of(exc).message}")
        return Counter()
    return Counter(r for t in topics if not t.error_code for p in t.partitions for r in p.replicas)


def _coordinated(access: ClusterAccess, notes: list[str]) -> dict[int, list[str]]:
    try:
        groups = access.admin_call(lambda admin: admin.list_groups()).groups_info
    except RillError as exc:
        notes.append(f"Groups: {problem_of(exc).message}")
        return {}
    by_broker: dict[int, list[str]] = {}
    for g in groups:
        if not g.error_code:
            by_broker.setdefault(g.controller_broker.broker_id, []).append(g.group_name)
    return by_broker


def _controller(access: ClusterAccess) -> tuple[int | None, str]:
    """The controller's id, or None and why it is not known."""
    def ask(admin: AdminClient) -> tuple[int, int, int]:
        answered = admin.list_partition_reassignments(redirects=0)
        return (int(answered.error_code), int(answered.controller.broker_id),
                int(admin.describe_cluster().controller_broker_id))

    try:
        code, named, answering = access.admin_call(ask)
    except RillError as exc:
        return None, problem_of(exc).message
    if code == pb.NONE:
        return answering, ""
    if code == pb.NOT_CONTROLLER:
        return (named, "") if named >= 0 else (None, "no controller is elected right now")
    return None, f"the broker answered {error_name(code)}"

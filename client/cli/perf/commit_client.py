"""A member committing offsets in a loop, shared by ``rill perf commits`` and ``commit-modes``.

:class:`CommitClient` alternates two CommitOffsets requests (offsets 0, and the end of the
one message each partition holds) and heartbeats between them; :func:`data_plane` finds
the data-plane address to append those messages to.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import grpc

from rill.client.grpc_client import AdminClient
from rill.client.cli.common import CliError
from rill.client.cli.perf.group_members import CLIENT_ID, Member, closed
from rill.client.blocking_connection import parse_address
from rill.v1 import coordinator_pb2 as pb


class CommitClient:
    """One member committing its partitions in a loop (and heartbeating between commits)."""

    def __init__(self, member: Member, ends: dict[int, int], heartbeat_interval: float) -> None:
        self.member = member
        self.ends = ends
        self.heartbeat_interval = heartbeat_interval
        self.calls = 0
        self.offsets = 0
        self.errors = 0
        self.heartbeats = 0
        self.rejoins = 0
        self.samples: list[int] = []
        self.requests: list[pb.CommitOffsetsRequest] = []

    def prepare(self) -> None:
        """The two requests it alternates between (offsets 0, offsets at the message's end)."""
        m = self.member
        self.requests = [pb.CommitOffsetsRequest(
            client_id=CLIENT_ID, consumer_group=m.group, consumer_id=m.consumer_id, generation=m.generation,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=self.ends[p] if end else 0)
                     for t, p in m.partitions]) for end in (False, True)]

    def run(self, deadline: Callable[[], float]) -> None:
        m, stub, timeout = self.member, self.member.stub.CommitOffsets, self.member.timeout
        self.prepare()
        next_beat = time.perf_counter() + self.heartbeat_interval
        i = 0
        end = deadline()
        while True:
            now = time.perf_counter()
            if now >= end:
                return
            if now >= next_beat:
                self.heartbeats += 1
                next_beat = now + self.heartbeat_interval
                if m.heartbeat() != pb.NONE:
                    self._rejoin()
                    continue
            request = self.requests[i & 1]
            i += 1
            t0 = time.perf_counter_ns()
            try:
                response = stub(request, timeout=timeout)
            except grpc.RpcError as exc:
                raise closed(m.address, exc) from exc
            self.samples.append(time.perf_counter_ns() - t0)
            if response.error_code == pb.NONE:
                self.calls += 1
                self.offsets += len(request.offsets)
            else:
                self.errors += 1
                self._rejoin()

    def _rejoin(self) -> None:
        self.rejoins += 1
        self.member.register()
        self.prepare()


def data_plane(args: argparse.Namespace, admin: AdminClient) -> tuple[str, int]:
    if args.broker:
        try:
            return parse_address(args.broker)
        except ValueError as exc:
            raise CliError(f"--broker: {exc}", 2) from None
    brokers = admin.describe_cluster().brokers
    if not brokers:
        raise CliError("DescribeCluster named no broker: give the data-plane address with --broker")
    try:
        host = parse_address(args.grpc)[0]
    except ValueError as exc:
        raise CliError(f"--grpc: {exc}", 2) from None
    return host, int(brokers[0].port)


__all__ = ["CommitClient", "data_plane"]

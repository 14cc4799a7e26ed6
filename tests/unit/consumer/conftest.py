"""Fakes for the consumer's unit tests: a clock, a broker on a socket pair, gRPC futures and a coordinator."""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from rill.client.net.broker_socket import BrokerSocket
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import INT16, INT32, FrameDecoder
from rill.v1 import coordinator_pb2 as pb


class FakeMetadata:
    """ClusterMetadata's surface the fetcher and group client use: one broker leads everything."""

    def __init__(self, partitions: dict[str, int] | None = None) -> None:
        self.brokers = {0: rq.BrokerInfo(0, "127.0.0.1", 1, 2)}
        self.topics = {t: rq.TopicMetadata(t, 0, (0,) * n) for t, n in (partitions or {"t": 4}).items()}
        self.refreshes = 0

    def leader(self, topic: str, partition: int) -> rq.BrokerInfo | None:
        t = self.topics.get(topic)
        return self.brokers[0] if t is not None and 0 <= partition < t.partitions else None

    def broker_partition(self, topic: str, partition: int) -> int:
        return partition

    def refresh(self, topics: Any = ()) -> None:
        self.refreshes += 1

    def partitions(self, topic: str) -> int | None:
        t = self.topics.get(topic)
        return t.partitions if t else None


class PeerBroker:
    """A broker the test plays: a real BrokerSocket on one end of a socket pair, the test on the other.

    Requests are read from the socket with the client's own sans-IO protocol object;
    responses are written as bytes, so the channel's framing and pairing are real.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        ours, self.peer = socket.socketpair()
        self.peer.setblocking(False)
        self.channel: BrokerSocket[Any] = BrokerSocket(("127.0.0.1", 1), node_id=0)
        self.channel.adopt(ours)
        self._requests = FrameDecoder(1 << 30)
        self._sent: list[rq.FetchWaitRequest] = []

    @property
    def closed(self) -> bool:
        return self.channel.sock is None

    @property
    def sent(self) -> list[rq.FetchWaitRequest]:
        """Every FETCH_WAIT the channel has written so far, in order."""
        try:
            while data := self.peer.recv(1 << 20):
                self._requests.feed(data)
        except BlockingIOError:
            pass
        while (body := self._requests.next_frame()) is not None:
            kind, request = rq.decode_request(body)
            assert kind == rq.RequestType.FETCH_WAIT
            self._sent.append(request)  # type: ignore[arg-type]
        return self._sent

    def respond(self, blocks: Sequence[tuple[int, bytes]], error: int = 0) -> None:
        body = INT16.pack(error) + b"".join(INT32.pack(2 + len(d)) + INT16.pack(e) + d for e, d in blocks)
        self.peer.sendall(INT32.pack(len(body)) + body)

    def hang_up(self) -> None:
        """The broker closes the connection."""
        self.peer.close()


class FakeFuture:
    """A grpc.Future the test completes."""

    def __init__(self, result: Any = None, error: BaseException | None = None, done: bool = False) -> None:
        self._result, self._error, self._done = result, error, done or result is not None or error is not None
        self.callbacks: list[Callable[[Any], None]] = []
        self.cancelled = False

    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result

    def complete(self, result: Any) -> None:
        self._result, self._done = result, True
        for cb in self.callbacks:
            cb(self)

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def add_done_callback(self, cb: Callable[[Any], None]) -> None:
        self.callbacks.append(cb)
        if self._done:
            cb(self)


class FakeCoordinator:
    """The AdminClient surface of the group client, answering from fields the test sets."""

    address = "127.0.0.1:2"

    def __init__(self) -> None:
        self.registers: list[dict[str, Any]] = []
        self.register_futures: deque[FakeFuture] = deque()
        self.heartbeats: list[dict[str, Any]] = []
        self.heartbeat_answer = pb.NONE
        self.commits: list[dict[str, Any]] = []
        self.commit_answer = pb.NONE
        self.rewinds: list[Any] = []
        self.left: list[str] = []
        self.created = 0
        self.list_answers: deque[int] = deque()  # error codes ListGroups answers first (then NONE)

    def list_groups(self, names: Sequence[str] = ()) -> pb.ListGroupsResponse:
        if self.list_answers:
            return pb.ListGroupsResponse(groups_info=[pb.GroupInfo(group_name=names[0],
                                                                   error_code=self.list_answers.popleft())])
        info = pb.GroupInfo(group_name=names[0], controller_broker=pb.Broker(host="127.0.0.1", grpc_port=2),
                            session_timeout=10_000)
        return pb.ListGroupsResponse(groups_info=[info])

    def create_group(self, *args: Any, **kwargs: Any) -> pb.CreateGroupResponse:
        self.created += 1
        return pb.CreateGroupResponse(coordinator=pb.Broker(host="127.0.0.1", grpc_port=2))

    def register_consumer_future(self, group: str, consumer_id: str, topics: Sequence[str],
                                 static_partitions: Sequence[tuple[str, int]], session_timeout_ms: int,
                                 timeout: float) -> FakeFuture:
        self.registers.append({"consumer_id": consumer_id, "topics": list(topics), "static": list(static_partitions)})
        return self.register_futures.popleft() if self.register_futures else FakeFuture()

    def heartbeat_future(self, group: str, consumer_id: str, generation: int, timeout: float) -> FakeFuture:
        self.heartbeats.append({"consumer_id": consumer_id, "generation": generation})
        return FakeFuture(pb.HeartbeatResponse(controller_generation=generation, error_code=self.heartbeat_answer))

    def commit(self, group: str, offsets: Sequence[tuple[str, int, int]], *, consumer_id: str = "",
               generation: int = 0) -> pb.CommitOffsetsResponse:
        self.commits.append({"offsets": list(offsets), "consumer_id": consumer_id, "generation": generation})
        return pb.CommitOffsetsResponse(error_code=self.commit_answer, offsets=[
            pb.PartitionOffset(topic=t, partition=p, offset=o, error_code=self.commit_answer) for t, p, o in offsets])

    def rewind(self, group: str, offsets: Sequence[tuple[str, int, int]], **kwargs: Any) -> pb.RewindConsumerResponse:
        self.rewinds.append(list(offsets))
        return pb.RewindConsumerResponse(actual_offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o)
                                                         for t, p, o in offsets])

    def leave_group(self, group: str, consumer_id: str) -> pb.LeaveGroupResponse:
        self.left.append(consumer_id)
        return pb.LeaveGroupResponse()

    def fetch_offsets(self, group: str, partitions: Sequence[tuple[str, int]] = ()) -> pb.FetchOffsetsResponse:
        return pb.FetchOffsetsResponse(offsets=[pb.PartitionOffset(topic=t, partition=p, offset=-1)
                                                for t, p in partitions])

    def close(self) -> None:
        pass


def joined(member: str, generation: int, partitions: dict[tuple[str, int], int]) -> pb.RegisterConsumerResponse:
    return pb.RegisterConsumerResponse(
        consumer_id=member, generation=generation, session_timeout=10_000,
        partitions_to_own=[pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in partitions.items()])

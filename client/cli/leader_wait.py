"""Waiting, after ``rill topics create`` or ``alter --partitions``, until every partition of a replicated topic
has a leader that serves it (it has heard from the controller): progress on stderr, CliError past the wait."""

from __future__ import annotations

import time

from rill.client.cli.common import CliError, info
from rill.client.grpc_client import AdminClient
from rill.client.protocol import requests as rq

__all__ = ["WAIT_POLL_S", "wait_for_leaders"]

WAIT_POLL_S = 0.2


def wait_for_leaders(client: AdminClient, topic: str, wait_s: float, *, done: str = "created") -> None:
    """Describe ``topic`` until every partition has a leader that serves it (answers its offsets); progress on
    stderr; CliError after ``wait_s`` (``done`` says what happened to the topic, for the message)."""
    deadline = time.monotonic() + wait_s
    reported = -1
    while True:
        described = client.describe_topics([topic]).topics
        partitions = list(described[0].partitions) if described and not described[0].error_code else []
        leaderless = [p.partition for p in partitions if p.leader == rq.NO_LEADER or p.end_offset < 0]
        if partitions and not leaderless:
            info(f"Every partition of {topic} has a leader.")
            return
        led = len(partitions) - len(leaderless)
        if led != reported:
            info(f"Waiting for leaders: {led} of {len(partitions)} partitions have one.")
            reported = led
        if time.monotonic() >= deadline:
            raise CliError(f"topic {topic} was {done}, but after {wait_s:g} s partitions {leaderless} still have "
                           "no leader (is every broker's controller connected to ZooKeeper?)")
        time.sleep(WAIT_POLL_S)

"""gRPC channels as rill opens them: a subchannel pool of their own, and reconnects at most 1 s apart.

gRPC shares a connection (a subchannel) between all channels of a process to the same
address, and after failed connects it waits before the next attempt, the wait growing
up to 120 s. A broker that was down for a while and comes back was therefore reached
only when that wait ran out, even through a channel opened after it returned: the
controller's LeaderAndIsr to a restarted broker (a fresh channel, the old one closed)
failed with UNAVAILABLE for up to two minutes while another channel of the process kept
the old subchannel and its backoff alive. Each channel here has its own subchannel pool
(``grpc.use_local_subchannel_pool``), and the backoff stops growing at 1 s, Kafka's
``reconnect.backoff.max.ms`` default.
"""

from __future__ import annotations

import grpc

__all__ = ["CHANNEL_OPTIONS", "insecure_channel"]

MAX_RECONNECT_BACKOFF_MS = 1000

CHANNEL_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
)


def insecure_channel(address: str) -> grpc.Channel:
    """A plaintext channel to ``address`` ("host:port") with :data:`CHANNEL_OPTIONS`."""
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)

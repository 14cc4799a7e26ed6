"""How a broker calls the other brokers' gRPC services: their plaintext gRPC port, or their TLS one.

Brokers call each other's gRPC: the controller's LeaderAndIsr, a stopping broker's
ControlledShutdown, a healing broker's LeaveIsr, a CreateGroup or ListGroups forwarded
to a group's coordinator. Every such call carries the cluster's broker token
(``authorization: Bearer <token>``), which makes it ``principal.BROKER``, a super-user,
so on the plaintext gRPC port (``grpc.port``) anyone on the path could read the token
and then do anything. Kafka encrypts all traffic between brokers once
``security.inter.broker.protocol`` is SSL or SASL_SSL; rill does the same when the
broker also has a TLS gRPC port (``grpc.ssl.port``):

- a peer is called on the gRPC port it advertised for the inter-broker listener
  (``BrokerRegistration.grpc_address(listener)``: a TLS listener is advertised with the
  TLS gRPC port, BrokerSecurity.advertised), at the host it advertised there, which its
  certificate must name;
- the channel verifies the peer against ``ssl.cafile`` and shows this broker's
  ``ssl.certfile`` / ``ssl.keyfile`` as its client certificate (what a TLS port with
  ``ssl.client.auth = required`` asks for; ignored otherwise). The files are read once,
  at start-up: replacing a certificate takes a restart, as for the TLS listeners.

Otherwise (a single broker, a plaintext or SASL_PLAINTEXT inter-broker protocol, or no
TLS gRPC port) a peer is called as before, on its registered ``host:grpc_port``, in
plaintext. The choice is the calling broker's own: every broker of a cluster needs a TLS
gRPC port before any of them calls over TLS (a rolling change: first ``grpc.ssl.port``
everywhere, then the inter-broker protocol, then, if wanted, ``grpc.port = -1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

from rill.broker.security.listeners import SecurityProtocol
from rill.client.grpc_channels import tls_credentials
from rill.client.zookeeper.registry import BrokerRegistration

__all__ = ["InterBrokerGrpc", "PLAINTEXT_GRPC", "inter_broker_grpc", "over_tls"]


@dataclass(frozen=True)
class InterBrokerGrpc:
    """Where and how this broker calls its peers' gRPC services (immutable, shared by every client).

    ``listener``: the listener whose advertised gRPC port peers are called on (None: their
    registered ``host:grpc_port``, the plaintext port). ``credentials``: the TLS channel
    credentials (None: plaintext channels).
    """

    listener: str | None = None
    credentials: grpc.ChannelCredentials | None = None

    @property
    def tls(self) -> bool:
        return self.credentials is not None

    def address(self, registration: BrokerRegistration) -> str:
        """``"host:port"`` of ``registration``'s gRPC port this broker calls."""
        return registration.grpc_address(self.listener)

    def describe(self) -> str:
        """For the start-up log: ``"TLS (SSL listener's gRPC port)"`` or ``"plaintext"``."""
        return f"TLS ({self.listener} listener's gRPC port)" if self.tls else "plaintext"


PLAINTEXT_GRPC = InterBrokerGrpc()
"""Peers called on their registered plaintext gRPC port, as without inter-broker TLS."""


def over_tls(config: Any) -> bool:
    """Whether brokers call each other's gRPC over TLS: in a cluster, with ``security.inter.broker.protocol``
    SSL or SASL_SSL and a TLS gRPC port (``grpc.ssl.port`` >= 0). Reads the settings only."""
    return (bool(config["zookeeper.connect"]) and config["grpc.ssl.port"] >= 0
            and SecurityProtocol.parse(config["security.inter.broker.protocol"]).tls)


def inter_broker_grpc(config: Any) -> InterBrokerGrpc:
    """How this broker calls its peers (see the module docstring); reads the TLS files once.

    Raises:
        ConfigError: a TLS file cannot be read.
    """
    if not over_tls(config):
        return PLAINTEXT_GRPC
    credentials = tls_credentials(config["ssl.cafile"], config["ssl.certfile"], config["ssl.keyfile"])
    return InterBrokerGrpc(SecurityProtocol.parse(config["security.inter.broker.protocol"]).value, credentials)

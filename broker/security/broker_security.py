"""The broker's security settings put together: its listeners, their TLS and SASL, and the user store.

:class:`BrokerSecurity` reads the configuration once (``listeners``, ``advertised.listeners``,
the ``ssl.*`` and ``sasl.*`` keys; rill.broker.security.listeners explains them) and gives
the data-plane server its listener specs. The SCRAM credentials live in the
entity-config store (``users/<name>`` entities, rill.client.security.scram_credentials):
a file in ``<log.dir>/.security`` for a single broker, ZooKeeper's ``/config/users`` in a
cluster (:meth:`BrokerSecurity.use_zookeeper` once the broker's session is up). Both are
watched, so ``rill users add`` applies without a restart.

The secret that makes the fake SCRAM salts of unknown users lives beside them (a file,
or a ZooKeeper node shared by the cluster), so a user that does not exist gets the same
salt from every broker, every time, as a real user does.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Any

import grpc
import structlog

from rill.broker.dataplane.listener_socket import Listener, ListenerSpec
from rill.broker.security.password_checks import PasswordChecks
from rill.broker.security.listeners import Endpoint, SecurityProtocol, advertised_endpoints, parse_listeners
from rill.broker.security.inter_broker_grpc import inter_broker_grpc
from rill.broker.security.sasl_authenticator import SaslAuthenticator
from rill.broker.security.tls_contexts import server_context
from rill.client.client_config import ConfigError
from rill.client.security.client_security import SASL_MECHANISMS, ClientSecurity, from_settings
from rill.client.security.entity_configs import EntityConfigs
from rill.client.security.entity_configs_file import DIRECTORY, FileEntityConfigs
from rill.client.security.entity_configs_zk import ZkEntityConfigs
from rill.client.security.plain import PasswordCache
from rill.client.security.scram import ScramCredential
from rill.client.security import principal as principals
from rill.client.security.scram_credentials import CredentialStore
from rill.client.security.acl_store import AclStore
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acl_store_zk import ZkAclStore
from rill.client.security.acls import Operation, ResourceType
from rill.broker.security.authorizer import Authorizer, parse_super_users
from rill.broker.security.partition_cap import PartitionCap
from rill.broker.security.quota_manager import QuotaManager, QuotaSettings
from rill.broker.security.rate_windows import WindowSettings
from rill.coordinator.grpc_auth import CallAuthenticator, ServerSecurity

__all__ = ["BrokerSecurity", "SECURITY_DIR"]

log = structlog.get_logger(__name__)

SECURITY_DIR = DIRECTORY  # in log.dir: a dot name, which the log loader skips
MOCK_SECRET_FILE = "scram-mock-secret"
MOCK_SECRET_ZNODE = "/rill/security/scram-mock-secret"
BROKER_TOKEN_ZNODE = "/rill/security/broker-token"


class BrokerSecurity:
    """Listeners and authentication of one broker (see the module docstring)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        text = config["listeners"]
        self.endpoints = parse_listeners(text) if text else [
            Endpoint(SecurityProtocol.PLAINTEXT, config["host.name"], config["port"])]
        if not self.endpoints:
            raise ConfigError("listeners: at least one listener is needed")
        mechanisms = [m.strip().upper() for m in config["sasl.enabled.mechanisms"].split(",") if m.strip()]
        unknown = sorted(set(mechanisms) - set(SASL_MECHANISMS))
        if unknown or not mechanisms:
            raise ConfigError(f"sasl.enabled.mechanisms: {', '.join(unknown) or 'none given'}; "
                              f"supported: {', '.join(SASL_MECHANISMS)}")
        self.mechanisms = mechanisms
        self.tls = None
        if any(e.protocol.tls for e in self.endpoints):
            self.tls = server_context(config["ssl.certfile"], config["ssl.keyfile"], config["ssl.cafile"],
                                      config["ssl.client.auth"])
        self.sasl = any(e.protocol.sasl for e in self.endpoints)
        self.inter_broker = config["security.inter.broker.protocol"]
        if config["zookeeper.connect"] and self.inter_broker not in {e.name for e in self.endpoints}:
            raise ConfigError(f"security.inter.broker.protocol is {self.inter_broker}, which listeners does not have "
                              f"(it has {', '.join(e.name for e in self.endpoints)})")
        if (config["zookeeper.connect"] and self.inter_broker.startswith("SASL_")
                and not config["inter.broker.sasl.username"]):
            raise ConfigError(f"security.inter.broker.protocol {self.inter_broker} needs inter.broker.sasl.username "
                              "and inter.broker.sasl.password")
        self.inter_broker_grpc = inter_broker_grpc(config)
        """How this broker calls the others' gRPC: their TLS gRPC port over TLS with an SSL or SASL_SSL
        inter-broker protocol and grpc.ssl.port, else their plaintext one (rill.broker.security.inter_broker_grpc)."""
        self.configs: EntityConfigs | None = None
        self.credentials: CredentialStore | None = None
        self.acls: AclStore | None = None
        try:
            self.quotas = QuotaManager(QuotaSettings(
                WindowSettings(config["quota.window.num"], config["quota.window.size.seconds"]),
                config["quota.max.delay.seconds"]))
        except ValueError as exc:
            raise ConfigError(f"quota.window.num, quota.window.size.seconds, quota.max.delay.seconds: {exc}") from exc
        """Client quotas, from the entity configs (rill.broker.dataplane.connection_quotas enforces them)."""
        self.partition_cap = PartitionCap(self.quotas, lambda: self.configs)
        self.authorizer: Authorizer | None = None
        """The ACLs' authorizer with ``authorizer.enable`` (None: every request is allowed, as without Kafka's)."""
        self._mock_secret = b""
        self.passwords = PasswordChecks(lambda user: self._lookup(user, "SCRAM-SHA-256"), PasswordCache())
        """PLAIN's checks, shared by the data plane's connections and gRPC calls (off the event loops)."""
        self.broker_token = secrets.token_hex(32)
        """What brokers show each other on gRPC (principal.BROKER): one per cluster, in ZooKeeper."""

    def listener_specs(self) -> list[ListenerSpec]:
        specs = []
        for endpoint in self.endpoints:
            specs.append(ListenerSpec(
                endpoint, self.tls if endpoint.protocol.tls else None,
                self._authenticator if endpoint.protocol.sasl else None,
                self.config["sasl.server.max.receive.size"]))
        return specs

    def _authenticator(self, _conn: object) -> SaslAuthenticator:
        return SaslAuthenticator(self.mechanisms, self._lookup, self._mock_secret, self.passwords)

    def _lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        store = self.credentials
        if store is None:
            return None
        found = store.lookup(user, mechanism)
        if found is None and isinstance(self.configs, FileEntityConfigs):
            # a user added a moment ago (rill users add, then a client at once): look at the file now
            # rather than at the watcher's next poll (a stat when unchanged)
            self.configs.poll()
            found = store.lookup(user, mechanism)
        return found

    def advertised(self, bound: list[Listener], default_host: str, grpc_port: int,
                   grpc_tls_port: int) -> dict[str, tuple[str, int, int]]:
        """Each listener's advertised ``(host, port, gRPC port)`` by name, once bound (port 0 resolved).
        Clients of a TLS listener get the TLS gRPC port (when there is one), others the plaintext one
        (or the TLS one when there is no plaintext gRPC)."""
        endpoints = advertised_endpoints([listener.endpoint for listener in bound], self.config["advertised.listeners"],
                                         default_host)
        result = {}
        for name, e in endpoints.items():
            tls = e.protocol.tls and grpc_tls_port >= 0 or grpc_port < 0
            result[name] = (e.host, e.port, grpc_tls_port if tls else grpc_port)
        return result

    @property
    def enabled(self) -> bool:
        """Whether anything of security is configured (then the user store is opened)."""
        return (self.sasl or self.tls is not None or self.config["grpc.ssl.port"] >= 0
                or self.config["authorizer.enable"])

    def grpc_security(self, host: str) -> ServerSecurity:
        """The gRPC server's: credentials checked against the users, the brokers' token, every call authorized
        with ``authorizer.enable`` (rill.coordinator.grpc_authorization); a TLS port with ``grpc.ssl.port``.

        Raises:
            ConfigError: no gRPC port at all, no plaintext one in a cluster whose brokers call each other
                on it (inter-broker gRPC not over TLS), or TLS without its files.
        """
        port = self.config["grpc.ssl.port"]
        if self.config["grpc.port"] < 0:
            if port < 0:
                raise ConfigError("grpc.port is -1 and grpc.ssl.port is not set: the broker would serve no gRPC")
            if self.config["zookeeper.connect"] and not self.inter_broker_grpc.tls:
                raise ConfigError("grpc.port = -1 in a cluster: brokers would call each other's plaintext gRPC "
                                  "port; set security.inter.broker.protocol to SSL or SASL_SSL (with grpc.ssl.port) "
                                  "so that they call each other's TLS gRPC port, or keep grpc.port (on a private "
                                  "address with host.name)")
        # the token is read at each call: a cluster's replaces this broker's own once ZooKeeper is joined,
        # after the server started; authorize only with authorizer.enable (otherwise no check, no cost)
        security = ServerSecurity(CallAuthenticator(self.check_password, broker_token=lambda: self.broker_token,
                                                    submit_check=self.passwords.submit),
                                  authorize=self.authorize if self.config["authorizer.enable"] else None)
        if port >= 0:
            certfile, keyfile, cafile = self.config["ssl.certfile"], self.config["ssl.keyfile"], self.config["ssl.cafile"]
            server_context(certfile, keyfile, cafile, self.config["ssl.client.auth"])  # checks the files
            required = self.config["ssl.client.auth"] == "required"
            with open(keyfile, "rb") as k, open(certfile, "rb") as c:
                pair = (k.read(), c.read())
            roots = None
            if required:
                with open(cafile, "rb") as f:
                    roots = f.read()
            security.tls_address = f"{host}:{port}"
            security.credentials = grpc.ssl_server_credentials([pair], root_certificates=roots,
                                                               require_client_auth=required)
        return security

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (its SCRAM-SHA-256 credential), for gRPC calls' credentials
        (on the calling thread: the sync server's worker)."""
        return self.passwords.check(user, password)

    def inter_broker_client(self) -> ClientSecurity | None:
        """How this broker's replica fetchers connect to leaders (None: plaintext, as ANONYMOUS; a single
        broker has no replica fetchers)."""
        c = self.config
        if not c["zookeeper.connect"]:
            return None
        return from_settings({
            "security.protocol": self.inter_broker, "ssl.cafile": c["ssl.cafile"], "ssl.certfile": c["ssl.certfile"],
            "ssl.keyfile": c["ssl.keyfile"], "sasl.mechanism": c["inter.broker.sasl.mechanism"],
            "sasl.plain.username": c["inter.broker.sasl.username"],
            "sasl.plain.password": c["inter.broker.sasl.password"]})

    @staticmethod
    def registered(bound: list[Listener]) -> Listener:
        """The listener published as the broker's address (Kafka 0.7's /brokers/ids, replicas' fetches):
        the PLAINTEXT one if there is one, else the first."""
        return next((b for b in bound if b.endpoint.protocol is SecurityProtocol.PLAINTEXT), bound[0])

    # ---------------------------------------------------------------- stores

    def use_data_dir(self, log_dir: str) -> None:
        """A single broker: users, quotas and ACLs in ``<log.dir>/.security`` (owner-only)."""
        self._attach(FileEntityConfigs(log_dir), FileAclStore(log_dir))
        if not self.sasl:
            return  # no SCRAM exchange: no fake salts to keep
        directory = os.path.join(log_dir, SECURITY_DIR)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        path = os.path.join(directory, MOCK_SECRET_FILE)
        try:
            with open(path, "rb") as f:
                self._mock_secret = f.read()
        except FileNotFoundError:
            secret = secrets.token_bytes(32)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as f:
                f.write(secret)
            self._mock_secret = secret

    def use_zookeeper(self, zk: Any) -> None:
        """A cluster: users in ZooKeeper (Kafka's /config/users), the mock secret shared by every broker."""
        from kazoo.exceptions import NodeExistsError

        if self.configs is not None:
            self.configs.close()
        if self.acls is not None:
            self.acls.close()
        self._attach(ZkEntityConfigs(zk), ZkAclStore(zk))
        zk.ensure_path(MOCK_SECRET_ZNODE.rsplit("/", 1)[0])
        with contextlib.suppress(NodeExistsError):  # another broker made it first: use that one
            zk.create(MOCK_SECRET_ZNODE, secrets.token_bytes(32))
        self._mock_secret = zk.get(MOCK_SECRET_ZNODE)[0]
        with contextlib.suppress(NodeExistsError):
            zk.create(BROKER_TOKEN_ZNODE, secrets.token_hex(32).encode())
        self.broker_token = zk.get(BROKER_TOKEN_ZNODE)[0].decode()

    def _attach(self, configs: EntityConfigs, acls: AclStore) -> None:
        self.configs = configs
        self.credentials = CredentialStore(configs)
        self.acls = acls
        self.quotas.follow(configs)
        if self.config["authorizer.enable"]:
            self.authorizer = Authorizer(acls, parse_super_users(self.config["super.users"]),
                                         self.config["allow.everyone.if.no.acl.found"])

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """The authorizer's answer: every request is allowed without ``authorizer.enable``; with it,
        none until the ACLs are loaded (in a cluster, once ZooKeeper is reached); the brokers' own
        calls to each other (principal.BROKER) always."""
        if not self.config["authorizer.enable"] or principal == principals.BROKER:
            return True
        authorizer = self.authorizer
        return authorizer is not None and authorizer.authorize(principal, host, operation, resource_type, name)

    def close(self) -> None:
        self.passwords.close()
        self.partition_cap.close()
        if self.configs is not None:
            self.configs.close()
            self.configs = None
        if self.acls is not None:
            self.acls.close()
            self.acls = None

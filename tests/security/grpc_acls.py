"""A broker with ACLs for the gRPC authorization tests: its users, its ACL file, and calls as a user.

``Secured.call(user, service, method, request)`` makes one call with that user's SASL
credentials (None: anonymous) and returns the response or the grpc.RpcError;
:func:`denied` reads the refusal's ``rill-error`` trailer. ``Acls.set`` replaces the
broker's ACL file as ``rill acls`` writes it and returns once the broker applies it
(asking it to read the file at once rather than at its next one-second look).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from rill.broker.testing import RunningBroker, running_broker
from rill.client.grpc_channels import ERROR_TRAILER, insecure_channel, open_channel
from rill.client.security.acl_store_file import FileAclStore
from rill.client.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, Operation, Permission,
                                       ResourcePattern, ResourceType)
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from rill.v1 import replication_pb2 as rpb
from rill.v1 import replication_pb2_grpc as rpb_grpc

O, R = Operation, ResourceType
BOB, ADMIN, MARKER = "User:bob", "User:admin", "User:acl-marker"
PASSWORDS = {"bob": "bob-secret", "admin": "admin-secret"}
SERVICES = {"GroupCoordinator": (pb, pb_grpc.GroupCoordinatorStub), "Admin": (apb, apb_grpc.AdminStub),
            "ReplicaControl": (rpb, rpb_grpc.ReplicaControlStub)}
Grant = tuple[Operation, ResourceType, str]
LISTENERS = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"  # brokers replicate over PLAINTEXT (the default)


def allow(principal: str, operation: Operation, kind: ResourceType, name: str,
          permission: Permission = Permission.ALLOW) -> AclBinding:
    """An ACL for ``principal`` from any host (an Allow unless ``permission`` says otherwise)."""
    return AclBinding(ResourcePattern(kind, name), AccessControlEntry(principal, "*", operation, permission))


class Acls:
    """The broker's ACL file, replaced whole by :meth:`set`, which returns once the broker applies it."""

    def __init__(self, broker: RunningBroker, data: Path) -> None:
        self.store = FileAclStore(data, poll_interval=None)
        self.security = broker.broker.security
        self.generation = 0

    def set(self, *bindings: AclBinding) -> None:
        self.generation += 1
        marker = f"marker-{self.generation}"  # visible to the authorizer once this file is
        self.store.remove(AclBindingFilter())
        self.store.add([*bindings, allow(MARKER, O.DESCRIBE, R.TOPIC, marker)])
        deadline = time.monotonic() + 10
        while not self._applied(marker):
            assert time.monotonic() < deadline, "the broker did not apply the ACLs within 10 s"
            assert self.security.acls is not None
            self.security.acls.reload_if_changed()  # what its poller does each second, now
            time.sleep(0.02)

    def _applied(self, marker: str) -> bool:
        """The marker's ACL is in force: it allows MARKER, and (allow.everyone.if.no.acl.found or not) closes
        the marker topic to everyone else."""
        ask = self.security.authorize
        return (ask(MARKER, "127.0.0.1", O.DESCRIBE, R.TOPIC, marker)
                and not ask("User:acl-probe", "127.0.0.1", O.DESCRIBE, R.TOPIC, marker))


@dataclass
class Secured:
    """A broker with ``authorizer.enable``, its ACLs, and its gRPC server's kind (sync, aio)."""

    broker: RunningBroker
    acls: Acls
    kind: str

    def call(self, user: str | None, service: str, method: str, request: Any, timeout: float = 15) -> Any:
        """The response of ``method``, or the grpc.RpcError it failed with; as ``user`` (None: anonymous)."""
        address = self.broker.grpc_address
        channel = (insecure_channel(address) if user is None
                   else open_channel(address, from_settings(sasl_settings(user))))
        with channel:
            try:
                return getattr(SERVICES[service][1](channel), method)(request, timeout=timeout)
            except grpc.RpcError as exc:
                return exc


def add_users(data: Path) -> None:
    """Every user of PASSWORDS, written before the broker starts (as an operator's first users)."""
    with FileEntityConfigs(data) as configs:
        for user, password in PASSWORDS.items():
            CredentialStore(configs).set_password(user, password)


def denied(result: Any) -> str | None:
    """The ``rill-error`` of a PERMISSION_DENIED call (None: not refused; '' when it has no trailer)."""
    if not isinstance(result, grpc.RpcError) or result.code() is not grpc.StatusCode.PERMISSION_DENIED:
        return None
    return next((str(v) for k, v in result.trailing_metadata() or () if k == ERROR_TRAILER), "")


@contextmanager
def secured_broker(data: Path, kind: str = "sync", **overrides: Any) -> Iterator[Secured]:
    """A broker in ``data`` with authorizer.enable, the users of PASSWORDS and no ACL yet."""
    add_users(data)
    with running_broker(data, authorizer_enable=True, grpc_server=kind, listeners=LISTENERS, **overrides) as b:
        s = Secured(b, Acls(b, data), kind)
        s.acls.set()
        yield s


def sasl_settings(user: str, password: str | None = None) -> dict[str, str]:
    """A client's settings for ``user`` over SASL_PLAINTEXT (its password from PASSWORDS unless given)."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.plain.username": user, "sasl.plain.password": PASSWORDS[user] if password is None else password}

"""PLAIN's password checks never hold up the broker's event loops.

A PLAIN password costs a PBKDF2 (milliseconds, and every time for a wrong one). The
tests hold the broker's check until they let it go (``PasswordChecks.verify`` replaced
by one that waits on an event) and show that, meanwhile, other clients are served: the
data plane's loop while a SASL_AUTHENTICATE waits, and the gRPC server (sync, and
grpc.aio's event loop) while a call's ``Basic`` credentials wait. A password that
succeeded a moment ago is not checked again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import AuthenticationFailed, ConnectionClosed
from rill.client.grpc_client import AdminClient
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.client.simple import SimpleConsumer

PLAIN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.plain.username": "alice",
         "sasl.plain.password": "alice-secret"}


class HeldChecks:
    """Replaces a broker's password check (``PasswordChecks.verify``, which every check not remembered runs)
    with one that waits for :meth:`release`, recording its threads."""

    def __init__(self, broker: RunningBroker) -> None:
        checks = broker.broker.security.passwords
        self.original: Callable[..., bool] = checks.verify
        self.threads: list[str] = []
        self.started = threading.Event()
        self.released = threading.Event()
        checks.verify = self._held  # type: ignore[method-assign]

    def _held(self, *args: Any) -> bool:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        assert self.released.wait(30), "the test never released the check"
        return self.original(*args)

    def release(self) -> None:
        self.released.set()


@pytest.fixture(params=["sync", "aio"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    data = tmp_path / "data"
    data.mkdir()
    with FileEntityConfigs(data) as configs:
        CredentialStore(configs).set_password("alice", "alice-secret")
    with running_broker(data, listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256", grpc_server=request.param) as b:
        yield b


def in_thread(work: Callable[[], Any]) -> Future[Any]:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(work)
    pool.shutdown(wait=False)
    return future


def plain_metadata(broker: RunningBroker, password: str = "alice-secret") -> list[int]:
    settings = {**PLAIN, "sasl.plain.password": password}
    with SimpleConsumer("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), timeout=30,
                        security=from_settings(settings)) as c:
        return [b.port for b in c.metadata([]).brokers]


def test_a_held_plain_login_leaves_the_data_plane_serving(broker: RunningBroker) -> None:
    held = HeldChecks(broker)
    login = in_thread(lambda: plain_metadata(broker))
    wrong = in_thread(lambda: plain_metadata(broker, "wrong"))
    assert held.started.wait(10), "no password check began"
    for _ in range(20):  # the loop answers other clients while both checks wait
        with SimpleConsumer("127.0.0.1", broker.port, timeout=5) as c:
            assert c.metadata([]).brokers
    assert not login.done() and not wrong.done()
    assert all(name.startswith("rill-password-check") for name in held.threads), held.threads
    held.release()
    assert login.result(30) == [broker.listener_port("SASL_PLAINTEXT")]
    with pytest.raises(AuthenticationFailed):
        wrong.result(30)
    checked = len(held.threads)
    assert plain_metadata(broker) and len(held.threads) == checked, "a remembered password was checked again"


def test_a_held_grpc_password_check_leaves_other_calls_served(broker: RunningBroker) -> None:
    held = HeldChecks(broker)
    address = f"127.0.0.1:{broker.grpc_port}"
    secured = AdminClient(address, 30, security=from_settings(PLAIN))
    wrong = AdminClient(address, 30, security=from_settings({**PLAIN, "sasl.plain.password": "wrong"}))
    try:
        call = in_thread(lambda: secured.create_group("held", ["t"]).error_code)
        refused = in_thread(wrong.list_groups)
        assert held.started.wait(10), "no password check began"
        with AdminClient(address, 5) as anonymous:
            for _ in range(20):
                assert anonymous.list_groups().groups_info is not None
        assert not call.done() and not refused.done()
        if broker.broker.config["grpc.server"] == "aio":
            assert all(name.startswith("rill-password-check") for name in held.threads), held.threads
        held.release()
        assert call.result(30) == 0
        with pytest.raises(ConnectionClosed, match="UNAUTHENTICATED"):
            refused.result(30)
    finally:
        held.release()
        secured.close()
        wrong.close()

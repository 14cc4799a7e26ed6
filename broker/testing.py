"""Run a real broker in-process for tests: ``with running_broker(tmp_path) as b: b.port``.

The broker's event loop runs on a background thread and listens on a free loopback
port. Overrides take configuration keys with dots or underscores
(``num_partitions=2``, ``"log.segment.bytes": 4096``).

``RILL_TEST_GRPC_SERVER`` (``sync`` or ``aio``), when set, is the default of
``grpc.server`` for these brokers, so the whole suite can run against either gRPC
server; an explicit ``grpc_server=`` override wins.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rill.broker.broker import Broker
from rill.broker.config import BrokerConfig

GRPC_SERVER_ENV = "RILL_TEST_GRPC_SERVER"


class RunningBroker:
    def __init__(self, broker: Broker, thread: threading.Thread) -> None:
        self.broker = broker
        self.server = broker.server
        self.thread = thread
        self.host = "127.0.0.1"
        self.port = broker.port
        self.grpc_port = broker.grpc_port
        self.metrics_port = broker.metrics_server.port if broker.metrics_server is not None else None

    @property
    def broker_id(self) -> int:
        return int(self.broker.config["broker.id"])

    def close(self) -> None:
        """Stop the broker now (as a clean shutdown); the context manager's exit then does nothing more."""
        self.broker.stop()
        self.thread.join(timeout=30)
        self.broker.close()

    def listener_port(self, name: str) -> int:
        """The port of the listener named ``name`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        for listener in self.server.listeners:
            if listener.endpoint.name == name:
                return listener.port
        raise KeyError(f"no {name} listener")

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@contextmanager
def running_broker(data_dir: str | Path, **overrides: Any) -> Iterator[RunningBroker]:
    settings: dict[str, Any] = {"log.dir": str(data_dir), "port": 0, "grpc.port": 0, "host.name": "127.0.0.1",
                                "metrics.port": -1,  # on, so the whole suite runs the request path with metrics
                                # a test cluster of any size has a groups topic (tests of factor 3 say so)
                                "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 5}
    if os.environ.get(GRPC_SERVER_ENV):
        settings["grpc.server"] = os.environ[GRPC_SERVER_ENV]
    settings.update({k.replace("_", "."): v for k, v in overrides.items()})
    broker = Broker(BrokerConfig.load(None, settings))
    thread = threading.Thread(target=broker.serve_forever, name="rill-broker", daemon=True)
    thread.start()
    broker.ready.wait(30)
    try:
        yield RunningBroker(broker, thread)
    finally:
        broker.stop()
        thread.join(timeout=30)
        broker.close()

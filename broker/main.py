"""``rill-broker``: start a broker.

    rill-broker [--config FILE] [--data-dir DIR] [--port PORT] [--host HOST]
                [--zookeeper HOST:PORT[/chroot]] [--set KEY=VALUE ...] [--truncate-corrupt]

Flags override the file, which overrides the defaults (docs/operations.md). SIGTERM
and SIGINT stop it gracefully: responses already computed are sent, every
partition is flushed, and a clean-shutdown marker lets the next start skip recovery.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

import structlog

from rill.broker.config import BrokerConfig, ConfigError, describe_keys
from rill.client.errors import StorageError
from rill.client.logconfig import configure_logging

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rill-broker", description="Run a rill broker (Kafka 0.7 protocol).")
    p.add_argument("--config", help="TOML configuration file")
    p.add_argument("--data-dir", help="directory for the partitions (log.dir; default ./rill-data)")
    p.add_argument("--port", type=int, help="listener port (port; default 9092, 0 = any free port)")
    p.add_argument("--host", help="address to bind (host.name; default 0.0.0.0)")
    p.add_argument("--broker-id", type=int, help="broker id (broker.id)")
    p.add_argument("--grpc-port", type=int, help="gRPC port of the coordinator and admin services (grpc.port; default 9093)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                   help="register in ZooKeeper (zookeeper.connect; default: none, standalone)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any configuration key, e.g. --set log.segment.bytes=1048576 (repeatable)")
    p.add_argument("--truncate-corrupt", action="store_true",
                   help="open partitions with mid-log corruption by cutting them there (cut bytes kept aside)")
    p.add_argument("--log-level", default="info", help="debug, info, warning, error")
    p.add_argument("--log-format", choices=("console", "json"), default="console")
    p.add_argument("--help-config", action="store_true", help="list every configuration key and exit")
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    for flag, key in (("data_dir", "log.dir"), ("port", "port"), ("host", "host.name"), ("broker_id", "broker.id"), ("grpc_port", "grpc.port"),
                      ("zookeeper", "zookeeper.connect")):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    if args.truncate_corrupt:
        overrides["log.recovery.truncate.corrupt"] = True
    return overrides


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.help_config:
        for name, default, doc in describe_keys():
            sys.stdout.write(f"{name} = {default}\n    {doc}\n")
        return 0
    configure_logging(args.log_level, args.log_format)
    try:
        config = BrokerConfig.load(args.config, _overrides(args))
    except ConfigError as exc:
        sys.stderr.write(f"rill-broker: {exc}\n")
        return 2
    from rill.broker.broker import Broker

    try:
        broker = Broker(config)
    except StorageError as exc:
        log.error("broker.start_failed", error=str(exc))
        return 1
    except (OSError, RuntimeError) as exc:
        log.error("broker.start_failed", error=str(getattr(exc, "strerror", None) or exc),
                  port=config["port"], grpc_port=config["grpc.port"])
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: broker.stop())
    try:
        broker.serve_forever()
    finally:
        broker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``rill-broker``: start a broker.

    rill-broker [--config FILE] [--data-dir DIR] [--port PORT] [--host HOST]
                [--zookeeper HOST:PORT[/chroot]] [--set KEY=VALUE ...] [--truncate-corrupt]
    rill-broker --data-dir DIR --verify-logs [--repair cut|quarantine] [--json]

Flags override the file, which overrides the defaults (docs/operations.md). SIGTERM
and SIGINT stop it gracefully: responses already computed are sent, every
partition is flushed, and a clean-shutdown marker lets the next start skip recovery
(of every partition but those that had failed, which it names). Exit codes: 0 after a
stop, 1 when it cannot start (the reason names the file and what to do), 2 for a bad
flag or configuration; ``--verify-logs`` exits 0, 3 (corrupt ranges found) or 1.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

import structlog

from rill.broker.config import BrokerConfig, ConfigError, describe_keys
from rill.broker.startup_errors import describe_os_error
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
    p.add_argument("--metrics-port", type=int,
                   help="Prometheus /metrics port (metrics.port; default 9404, 0 = none, -1 = any free port)")
    p.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]",
                   help="register in ZooKeeper (zookeeper.connect; default: none, standalone)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any configuration key, e.g. --set log.segment.bytes=1048576 (repeatable)")
    p.add_argument("--truncate-corrupt", action="store_true",
                   help="open partitions with mid-log corruption by cutting them there (cut bytes kept aside)")
    p.add_argument("--verify-logs", action="store_true",
                   help="check every message of every segment of the (stopped) broker's data directory, report "
                        "each corrupt range, and exit: 0 none, 3 found, 1 could not check")
    p.add_argument("--repair", choices=("cut", "quarantine"),
                   help="with --verify-logs: repair what it finds: quarantine a range (it becomes filler that "
                        "consumers skip; offsets and later data stay) or cut the partition there; removed bytes "
                        "are kept in side files")
    p.add_argument("--json", action="store_true", help="with --verify-logs: one JSON object per line on stdout")
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
                      ("metrics_port", "metrics.port"), ("zookeeper", "zookeeper.connect")):
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
    if args.repair and not args.verify_logs:
        sys.stderr.write("rill-broker: --repair needs --verify-logs\n")
        return 2
    try:
        config = BrokerConfig.load(args.config, _overrides(args))
    except ConfigError as exc:
        sys.stderr.write(f"rill-broker: {exc}\n")
        return 2
    if args.verify_logs:
        from rill.broker import verify_command

        return verify_command.run(config, args.repair, args.json)
    from rill.broker.broker import Broker

    try:
        broker = Broker(config)
    except StorageError as exc:
        log.error("broker.start_failed", error=str(exc))
        return 1
    except OSError as exc:
        log.error("broker.start_failed", error=describe_os_error(exc), port=config["port"],
                  grpc_port=config["grpc.port"], log_dir=str(config["log.dir"]))
        return 1
    except RuntimeError as exc:
        log.error("broker.start_failed", error=str(exc), port=config["port"], grpc_port=config["grpc.port"])
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: broker.stop())
    try:
        broker.serve_forever()
    finally:
        broker.close()  # logs any partition that had failed; a stop is a clean stop all the same
    return 0


if __name__ == "__main__":
    sys.exit(main())

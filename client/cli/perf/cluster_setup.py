"""What ``rill perf replication`` and ``rill perf failover`` share: their cluster's arguments and start.

Both start a cluster of their own (rill.client.cli.spawned_cluster): a ZooKeeper (or a
chroot of the one ``--zookeeper`` names) and ``--brokers`` brokers on data directories
under ``--dir`` (a temporary directory by default: put it on ``/dev/shm`` to take the
disk out of the figures, as docs/benchmarks.md does).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from typing import Any

from rill.client.cli.common import info, positive_int
from rill.client.cli.spawned_broker import raise_own_fd_limit
from rill.client.cli.spawned_cluster import SpawnedCluster, cleanup

def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=positive_int, default=3, help="brokers in the cluster (default: 3)")
    parser.add_argument("--zookeeper", metavar="HOST:PORT",
                        help="a running ZooKeeper to use (under a chroot of the run's own); "
                             "default: start one from Debian's jar")
    parser.add_argument("--dir", help="where the brokers keep their data (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the data and the brokers' logs afterwards")
    parser.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="a broker setting for every broker, e.g. --set zookeeper.session.timeout.ms=2000")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def broker_settings(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The brokers' settings: their defaults, what the benchmark needs (``extra``), then ``--set``."""
    settings = dict(extra or {})
    for item in args.settings:
        key, _, value = item.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def new_cluster(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> SpawnedCluster:
    """A cluster (not started yet) in a fresh work directory under ``--dir``."""
    raise_own_fd_limit()
    work = tempfile.mkdtemp(prefix="rill-perf-cluster-", dir=args.dir)
    return SpawnedCluster(work, args.brokers, broker_settings(args, extra), zookeeper=args.zookeeper)


def finish(args: argparse.Namespace, cluster: SpawnedCluster) -> None:
    """Stop the cluster; remove its work directory unless ``--keep``."""
    cluster.stop()
    if args.keep:
        say(args, f"  data and logs kept in {cluster.work}")
    else:
        cleanup(cluster.work)


def say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        info(text)


def payloads(size: int, count: int = 1024) -> list[bytes]:
    rng = random.Random(7)
    return [rng.randbytes(size) for _ in range(count)]


__all__ = ["add_cluster_arguments", "broker_settings", "finish", "new_cluster", "payloads", "say"]

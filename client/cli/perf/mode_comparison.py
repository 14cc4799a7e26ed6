"""What ``rill perf commit-modes`` and ``rebalance-modes`` share: arguments, ZooKeeper, ratios.

Both run the native coordinator and ZooKeeper (0.7) mode in one invocation, on the
same brokers and the same ZooKeeper, and print both figures and their ratio (native /
ZooKeeper for rates, ZooKeeper / native for times), so the ratio comes from one run on
one machine state.
"""

from __future__ import annotations

import argparse
import time

from kazoo.client import KazooClient

from rill.client.grpc_client import AdminClient
from rill.client.cli.common import CliError, topic_name
from rill.client.cli.bootstrap import add_grpc_arguments


def comparison_arguments(parser: argparse.ArgumentParser, prefix: str) -> None:
    """The arguments both commands share: --grpc, --zookeeper, --group-prefix, --json, -q."""
    add_grpc_arguments(parser)
    parser.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]",
                        help="the ZooKeeper the brokers are registered in (zookeeper.connect)")
    parser.add_argument("--group-prefix", type=topic_name, default=prefix, metavar="NAME",
                        help=f"groups are named PREFIX-<mode>-<run id>-... (default: {prefix})")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def ratio_text(value: float | None) -> str:
    """``12.3x``; three significant digits below 10 (``0.0123x``)."""
    if value is None:
        return "n/a (a figure is 0)"
    return f"{value:,.1f}x" if value >= 10 else f"{value:.3g}x"


def start_zk(connect: str, timeout: float) -> KazooClient:
    """A started KazooClient; raises CliError when ZooKeeper does not answer within ``timeout`` s."""
    zk = KazooClient(hosts=connect, timeout=timeout)
    try:
        zk.start(timeout=timeout)
    except Exception as exc:  # kazoo's timeout and connection errors
        zk.close()
        raise CliError(f"cannot connect to ZooKeeper at {connect}: {exc or type(exc).__name__}") from exc
    return zk


def wait_cluster(admin: AdminClient, zk: KazooClient, timeout: float = 30.0) -> None:
    """Wait until the broker at ``admin`` sees every broker registered in ZooKeeper (group placement
    depends on that view: a broker that has not seen another yet would place groups differently)."""
    deadline = time.monotonic() + timeout
    while True:
        registered = {int(b) for b in zk.get_children("/brokers/ids")} if zk.exists("/brokers/ids") else set()
        seen = {b.broker_id for b in admin.describe_cluster().brokers}
        if registered and seen == registered:
            return
        if time.monotonic() > deadline:
            raise CliError(f"the broker sees brokers {sorted(seen)}, ZooKeeper lists {sorted(registered)}, "
                           f"after {timeout:.0f} s")
        time.sleep(0.1)


def stop_zk(zk: KazooClient) -> None:
    try:
        zk.stop()
    finally:
        zk.close()


__all__ = ["comparison_arguments", "ratio", "ratio_text", "start_zk", "stop_zk", "wait_cluster"]

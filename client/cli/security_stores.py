"""Where ``rill users``, ``rill quotas`` and ``rill acls`` read and write: a broker's data directory or a cluster's ZooKeeper.

Each of those commands takes exactly one of ``--data-dir DIR`` (a single broker's
``log.dir``: the files in ``DIR/.security``; run it on the broker's machine, as its user)
or ``--zookeeper HOST:PORT[/chroot]`` (a cluster's, in Kafka's paths), as Kafka's
``kafka-configs --zookeeper`` and ``kafka-acls --authorizer-properties
zookeeper.connect=...`` do. A running broker picks the change up by itself (it polls
the file each second, or watches ZooKeeper).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from rill.client.cli.common import CliError
from rill.client.security.entity_configs import EntityConfigError, EntityConfigs

__all__ = ["ZK_TIMEOUT_S", "add_store_arguments", "data_dir", "entity_configs", "zookeeper"]

ZK_TIMEOUT_S = 10.0


def add_store_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """``--data-dir`` or ``--zookeeper``, one of them required; ``what`` says what is kept there."""
    store = parser.add_mutually_exclusive_group(required=True)
    store.add_argument("--data-dir", metavar="DIR", help=f"a single broker's log.dir ({what} in DIR/.security)")
    store.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help="a cluster's ZooKeeper")


def data_dir(args: argparse.Namespace) -> str:
    """``--data-dir``, which must exist (a typo must not make a new, empty store)."""
    if not Path(args.data_dir).is_dir():
        raise CliError(f"data directory {args.data_dir} does not exist (give the broker's log.dir)")
    return str(args.data_dir)


@contextmanager
def zookeeper(connect: str, timeout: float | None = None) -> Iterator[KazooClient]:
    """A started kazoo client, stopped afterwards; CliError when ZooKeeper cannot be reached
    (within ``timeout`` seconds, default :data:`ZK_TIMEOUT_S`)."""
    timeout = ZK_TIMEOUT_S if timeout is None else timeout
    zk = KazooClient(hosts=connect, timeout=timeout)
    try:
        try:
            zk.start(timeout=timeout)
        except (KazooException, KazooTimeoutError, ValueError) as exc:
            raise CliError(f"cannot connect to ZooKeeper at {connect}: {exc}") from None
        yield zk
    finally:
        zk.stop()
        zk.close()


@contextmanager
def entity_configs(args: argparse.Namespace) -> Iterator[EntityConfigs]:
    """The entity-config store (users' credentials, quotas) the flags name; store errors become CliError."""
    from rill.client.security.entity_configs_file import FileEntityConfigs
    from rill.client.security.entity_configs_zk import ZkEntityConfigs

    try:
        if args.data_dir is not None:
            with FileEntityConfigs(data_dir(args)) as configs:
                yield configs
        else:
            with zookeeper(args.zookeeper) as zk, ZkEntityConfigs(zk) as configs:
                yield configs
    except EntityConfigError as exc:
        raise CliError(str(exc)) from None

"""``rill quotas set|list``: client quotas, as ``kafka-configs --entity-type users|clients`` sets them.

Quotas are keys of the user and client-id entities that also hold SCRAM credentials
(rill.client.security.quota_keys names them), in one store named by exactly one of:

- ``--data-dir DIR``: a single broker's log.dir (``DIR/.security/entity-configs.json``,
  rill.client.security.entity_configs_file). A running broker sees the change within its
  poll interval.
- ``--zookeeper HOST:PORT[/chroot]``: a cluster's ZooKeeper, Kafka's ``/config/users/...``
  and ``/config/clients/...`` layout with a change notification every broker watches
  (rill.client.security.entity_configs_zk).

The entity is ``--user U`` or ``--user-default``, ``--client-id C`` or
``--client-default``, or a user and a client id together (``users/U/clients/C``).

- ``set``: set the quotas given (``--producer-byte-rate``, ``--consumer-byte-rate``,
  ``--request-percentage``, ``--partitions-max``) and delete those named by ``--delete``.
  Keys it does not name stay, credentials included. The entity's quotas are printed
  afterwards.
- ``list``: ENTITY and each quota key, tab-separated, ``-`` where unset, for every entity
  that has a quota (``--user``, ``--client-id`` keep those naming that user or client id;
  ``<default>`` selects the default entities).

Bad values are refused before anything is written (``rill: error: quota ...``, exit 2).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rill.client.cli.common import EXIT_USAGE, CliError, info
from rill.client.cli.security_stores import add_store_arguments, entity_configs
from rill.client.security.entity_configs import (CLIENTS, DEFAULT, USERS, EntityConfigError, entity_path,
                                                 parse_entity)
from rill.client.security.quota_keys import (CONSUMER_BYTE_RATE, PARTITIONS_CREATED, PARTITIONS_CREATED_MAX,
                                             PRODUCER_BYTE_RATE, QUOTA_KEYS, REQUEST_PERCENTAGE, QuotaValueError, format_quota,
                                             parse_quota, quota_key)

if TYPE_CHECKING:
    from rill.client.security.entity_configs import EntityConfigs

__all__ = ["add_parser"]

UNSET = "-"
KEY_NAMES = tuple(key.name for key in QUOTA_KEYS)
# (flag, quota key, metavar) of the set action
SET_FLAGS = (
    ("--producer-byte-rate", PRODUCER_BYTE_RATE, "BYTES"),
    ("--consumer-byte-rate", CONSUMER_BYTE_RATE, "BYTES"),
    ("--request-percentage", REQUEST_PERCENTAGE, "PERCENT"),
    ("--partitions-max", PARTITIONS_CREATED_MAX, "N"),
)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("quotas", help="set or list client quotas (byte rates, loop share, partitions)",
                              description="Manage client quotas of a broker (--data-dir) or a cluster "
                                          "(--zookeeper), as kafka-configs --entity-type users|clients does.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    setter = actions.add_parser("set", help="set or delete quotas of one user, client id, or both")
    user = setter.add_mutually_exclusive_group()
    user.add_argument("--user", metavar="U", help="the user (a SASL user name; ANONYMOUS when unauthenticated)")
    user.add_argument("--user-default", action="store_true", help="the default user entity (<default>)")
    client = setter.add_mutually_exclusive_group()
    client.add_argument("--client-id", metavar="C", help="the client id")
    client.add_argument("--client-default", action="store_true", help="the default client-id entity (<default>)")
    for flag, name, metavar in SET_FLAGS:
        key = quota_key(name)
        setter.add_argument(flag, dest=name, metavar=metavar, help=f"{name}: {key.doc}")
    setter.add_argument("--delete", metavar="KEY", nargs="+", action="extend", default=[],
                        choices=(*KEY_NAMES, PARTITIONS_CREATED),
                        help=f"quota keys to delete ({', '.join(KEY_NAMES)}), or {PARTITIONS_CREATED} to reset the "
                             "count of partitions the user has created")
    add_store_arguments(setter, "quotas")
    setter.set_defaults(run=run_set)
    listing = actions.add_parser("list", help="every entity with a quota, and its quotas")
    listing.add_argument("--user", metavar="U", help="only entities of this user (<default>: the default)")
    listing.add_argument("--client-id", metavar="C", help="only entities of this client id (<default>: the default)")
    add_store_arguments(listing, "quotas")
    listing.set_defaults(run=run_list)


def _entity(args: argparse.Namespace) -> str:
    """The entity path the flags name.

    Raises:
        CliError: no user and no client id, or an invalid name (exit status 2).
    """
    user = DEFAULT if args.user_default else args.user
    client = DEFAULT if args.client_default else args.client_id
    if user is None and client is None:
        raise CliError("name the entity: --user U or --user-default, --client-id C or --client-default, "
                       "or a user and a client id", EXIT_USAGE)
    try:
        return entity_path(user, client)
    except EntityConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _changes(args: argparse.Namespace, entity: str) -> tuple[dict[str, str], list[str]]:
    """The keys to set (as stored) and to delete, checked.

    Raises:
        CliError: nothing to change, a bad value, a key both set and deleted, or a users-only
            key on an entity naming a client id (exit status 2).
    """
    given = {name: getattr(args, name) for _, name, _ in SET_FLAGS if getattr(args, name) is not None}
    if not given and not args.delete:
        raise CliError("nothing to change: give a quota (--producer-byte-rate, --consumer-byte-rate, "
                       "--request-percentage, --partitions-max) or --delete KEY", EXIT_USAGE)
    both = sorted(set(given) & set(args.delete))
    if both:
        raise CliError(f"quota {both[0]} is both set and deleted", EXIT_USAGE)
    _, client = parse_entity(entity)
    values: dict[str, str] = {}
    for name, text in given.items():
        if client is not None and quota_key(name).users_only:
            raise CliError(f"quota {name} applies to users only (--user U or --user-default, without a client "
                           f"id), not to {entity}", EXIT_USAGE)
        try:
            values[name] = format_quota(parse_quota(name, text))
        except QuotaValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    return values, list(dict.fromkeys(args.delete))


def _describe(config: dict[str, str]) -> str:
    quotas = [f"{name}={config[name]}" for name in KEY_NAMES if name in config]
    return ", ".join(quotas) if quotas else "no quotas"


def run_set(args: argparse.Namespace) -> int:
    entity = _entity(args)
    values, delete = _changes(args, entity)
    with entity_configs(args) as store:
        store.alter(entity, set=values, delete=delete)
        config = store.get(entity)
    print(f"Completed updating quotas of {entity}: {_describe(config)}.")
    return 0


def _entity_paths(store: EntityConfigs) -> list[str]:
    """Every entity path of ``store`` (``entities`` lists names: of users, of a user's client ids, of client ids)."""
    paths: list[str] = []
    for user in store.entities(USERS):
        paths.append(f"{USERS}/{user}")
        paths += [f"{USERS}/{user}/{CLIENTS}/{client}" for client in store.entities(f"{USERS}/{user}/{CLIENTS}")]
    return paths + [f"{CLIENTS}/{client}" for client in store.entities(CLIENTS)]


def run_list(args: argparse.Namespace) -> int:
    rows: list[tuple[str, dict[str, str]]] = []
    with entity_configs(args) as store:
        for entity in sorted(_entity_paths(store)):
            user, client = parse_entity(entity)
            if args.user not in (None, user) or args.client_id not in (None, client):
                continue
            config = store.get(entity)
            if any(name in config for name in KEY_NAMES):
                rows.append((entity, config))
    print("\t".join(("ENTITY", *KEY_NAMES)))
    for entity, config in rows:
        print("\t".join((entity, *(config.get(name, UNSET) for name in KEY_NAMES))))
    if not rows:
        info("No quotas.")
    return 0

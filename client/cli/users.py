"""``rill users add|delete|list``: SASL/SCRAM users, as ``kafka-configs --entity-type users`` manages them.

Each action works on one store, named by exactly one of:

- ``--data-dir DIR``: a single broker's log.dir; the users live in
  ``DIR/.security/entity-configs.json`` (rill.client.security.entity_configs_file). A running
  broker sees the change within its poll interval.
- ``--zookeeper HOST:PORT[/chroot]``: a cluster's ZooKeeper, in Kafka's layout
  (``/config/users/<name>`` and a ``/config/changes`` notification that every broker watches;
  rill.client.security.entity_configs_zk).

Actions:

- ``add NAME``: set the user's password for ``--mechanism`` (SCRAM-SHA-256 by default; PLAIN
  checks passwords against that one), replacing an old one. The password comes from
  ``--password``, ``--password-file`` (its first line), or else is asked twice on a terminal,
  or read as one line from standard input when it is not a terminal (``echo pw | rill users add``).
- ``delete NAME``: remove the user's credentials (``--mechanism``: only that one); an unknown
  user is an error (exit status 1). Other settings of the user (quotas) stay.
- ``list``: NAME and MECHANISMS, tab-separated; never a credential.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from rill.client.cli.common import CliError, info, positive_int
from rill.client.cli.security_stores import add_store_arguments, entity_configs
from rill.client.security.entity_configs import DEFAULT, EntityConfigError, validate_name
from rill.client.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from rill.client.security.scram_credentials import CredentialStore

__all__ = ["add_parser"]



def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("users", help="add, delete or list SASL/SCRAM users",
                              description="Manage SASL/SCRAM users of a broker (--data-dir) or a cluster "
                                          "(--zookeeper), as kafka-configs --entity-type users does.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a user or change its password")
    add.add_argument("name", metavar="NAME", type=user_name, help="the user name (its principal is User:NAME)")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password", metavar="P", help="the password (visible to other local users in ps; "
                                                        "default: asked on the terminal, or read from stdin)")
    source.add_argument("--password-file", metavar="FILE", help="read the password from the first line of FILE")
    _add_mechanism(add, default="SCRAM-SHA-256")
    add.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS, metavar="N",
                     help=f"PBKDF2 iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default: {DEFAULT_ITERATIONS})")
    add_store_arguments(add, "users")
    add.set_defaults(run=run_add)
    delete = actions.add_parser("delete", help="delete a user's credentials")
    delete.add_argument("name", metavar="NAME", type=user_name, help="the user name")
    _add_mechanism(delete, default=None)
    add_store_arguments(delete, "users")
    delete.set_defaults(run=run_delete)
    listing = actions.add_parser("list", help="every user and its mechanisms")
    add_store_arguments(listing, "users")
    listing.set_defaults(run=run_list)


def user_name(text: str) -> str:
    """argparse type for a user name (checked before a password is asked for)."""
    try:
        validate_name(text, "user name")
    except EntityConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if text == DEFAULT:
        raise argparse.ArgumentTypeError(f"{DEFAULT} is the default user entity (for quotas), not a user")
    return text


def _add_mechanism(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument("--mechanism", choices=MECHANISMS, default=default,
                        help=f"the SCRAM mechanism (default: {default or 'all of them'})")


def _first_line(line: str) -> str:
    """A line without its ending (``\n`` or ``\r\n``)."""
    return line.removesuffix("\n").removesuffix("\r")


def read_password(args: argparse.Namespace) -> str:
    """The password from ``--password``, ``--password-file``, the terminal (asked twice) or stdin (one line)."""
    password: str
    if args.password is not None:
        password = args.password
    elif args.password_file is not None:
        try:
            with open(args.password_file, encoding="utf-8") as file:
                password = _first_line(file.readline())
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read the password file {args.password_file}: {exc}") from None
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.name}: ")
        if getpass.getpass("Again: ") != password:
            raise CliError("the two passwords differ")
    else:
        password = _first_line(sys.stdin.readline())
    if not password:
        raise CliError("the password is empty")
    return password


def run_add(args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise CliError(f"--iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS} (Kafka's limits), "
                       f"got {args.iterations}")
    password = read_password(args)
    with entity_configs(args) as configs:
        store = CredentialStore(configs)
        existed = args.mechanism in store.users().get(args.name, [])
        store.set_password(args.name, password, args.mechanism, args.iterations)
    print(f"{'Updated' if existed else 'Added'} {args.mechanism} credential for user {args.name}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with entity_configs(args) as configs:
        store = CredentialStore(configs)
        had = store.users().get(args.name, [])
        if not store.delete(args.name, args.mechanism):
            which = f" has no {args.mechanism} credential" if had else " does not exist"
            raise CliError(f"user {args.name!r}{which} (rill users list shows the users)")
    removed = [args.mechanism] if args.mechanism else had
    print(f"Deleted {', '.join(removed)} credential{'s' if len(removed) > 1 else ''} of user {args.name}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with entity_configs(args) as configs:
        store = CredentialStore(configs)
        users = store.users()
    print("NAME\tMECHANISMS")
    for name, mechanisms in users.items():
        print(f"{name}\t{','.join(mechanisms)}")
    if not users:
        info("No users.")
    return 0


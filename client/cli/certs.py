"""``rill certs create DIR``: a throwaway CA with a broker certificate and client certificates.

Writes, in ``DIR``: ``ca.pem`` and ``ca.key`` (the CA), ``broker.pem`` and ``broker.key``
(for ``ssl.certfile`` and ``ssl.keyfile``, valid for the names given with ``--name``), and
``<client>.pem`` / ``<client>.key`` for each ``--client`` (their principal is
``User:<client>``). Keys are readable by their owner only. For trying TLS and for tests
(rill.client.security.throwaway_certs); a production cluster uses its organisation's CA.
"""

from __future__ import annotations

import argparse
import os

from rill.client.cli.common import CliError, info, positive_float

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("certs", help="make a throwaway CA and certificates for trying TLS",
                              description="Make throwaway TLS certificates (PEM files) for a broker and its clients.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="write ca.pem, broker.pem/.key and a certificate per --client")
    create.add_argument("directory", metavar="DIR", help="where to write the files (created if missing)")
    create.add_argument("--name", action="append", default=[], metavar="HOST",
                        help="a host name or IP address clients reach the broker by (repeatable; "
                             "default: localhost and 127.0.0.1)")
    create.add_argument("--client", action="append", default=[], metavar="NAME",
                        help="a client certificate with this common name, for ssl.client.auth (repeatable)")
    create.add_argument("--days", type=positive_float, default=365.0, help="validity in days (default: 365)")
    create.add_argument("--force", action="store_true", help="overwrite files that exist")
    create.set_defaults(run=run_create)


def run_create(args: argparse.Namespace) -> int:
    from rill.client.security.throwaway_certs import issue, make_ca, write_pair

    stems = ["ca", "broker", *args.client]
    if len(set(stems)) != len(stems):
        raise CliError("client names must differ from each other and from 'ca' and 'broker'")
    existing = [f"{stem}.{ext}" for stem in stems for ext in ("pem", "key")
                if os.path.exists(os.path.join(args.directory, f"{stem}.{ext}"))]
    if existing and not args.force:
        raise CliError(f"{args.directory} already holds {', '.join(existing)} (--force overwrites them)")
    names = args.name or ["localhost", "127.0.0.1"]
    ca = make_ca(days=args.days)
    write_pair(ca, args.directory, "ca")
    write_pair(issue(ca, "broker", names=names, days=args.days), args.directory, "broker")
    for client in args.client:
        write_pair(issue(ca, client, server=False, days=args.days), args.directory, client)
    info(f"Wrote a CA, a broker certificate for {', '.join(names)}"
         + (f" and client certificates for {', '.join(args.client)}" if args.client else "")
         + f" to {args.directory} (valid {args.days:g} days).")
    return 0

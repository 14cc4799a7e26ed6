"""``--command-config FILE``: client settings for a command, as Kafka's tools take them.

The file holds client settings with their dotted names: a Java-style properties file
(``key=value`` or ``key: value`` lines, ``#`` and ``!`` comments) or, when its name ends
in ``.toml``, a TOML table. Today it carries the security settings (``security.protocol``,
``ssl.cafile``, ``ssl.certfile``, ``ssl.keyfile``, ``ssl.check.hostname``,
``sasl.mechanism``, ``sasl.plain.username``, ``sasl.plain.password``;
rill.client.security.client_security), so that passwords stay out of the command line
and the shell's history:

    security.protocol=SASL_SSL
    ssl.cafile=certs/ca.pem
    sasl.mechanism=SCRAM-SHA-256
    sasl.plain.username=alice
    sasl.plain.password=alice-secret
"""

from __future__ import annotations

import argparse
import tomllib
from typing import Any

from rill.client.cli.common import CliError
from rill.client.client_config import ConfigError, resolve
from rill.client.security.client_security import SECURITY_SETTINGS, ClientSecurity, from_settings

__all__ = ["read_command_config", "security_of", "security_settings"]


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def read_command_config(path: str) -> dict[str, Any]:
    """The settings in ``path`` (properties, or TOML for a ``.toml`` name). Raises CliError."""
    try:
        if path.endswith(".toml"):
            with open(path, "rb") as f:
                return _flatten(tomllib.load(f))
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise CliError(f"cannot read --command-config {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"--command-config {path}: {exc}") from exc
    settings: dict[str, Any] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise CliError(f"--command-config {path}, line {number}: expected key=value, got {text!r}")
        settings[text[:cut].strip()] = text[cut + 1:].strip()
    return settings


def security_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of ``--command-config`` as the file gives them (dotted names, values unparsed): the
    config a Producer or Consumer takes, or a child process rebuilds a ClientSecurity from. Empty
    without the option.

    Raises:
        CliError: the file cannot be read, or names a setting that is not a security setting.
    """
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    settings = read_command_config(path)
    unknown = sorted(set(settings) - {s.name for s in SECURITY_SETTINGS})
    if unknown:
        raise CliError(f"--command-config {path}: unknown settings {', '.join(unknown)} (known: "
                       f"{', '.join(s.name for s in SECURITY_SETTINGS)})")
    return settings


def security_of(args: argparse.Namespace) -> ClientSecurity | None:
    """The command's connection security from ``--command-config`` (None: plaintext), read once per command."""
    if hasattr(args, "_security"):
        cached: ClientSecurity | None = args._security
        return cached
    settings = security_settings(args)
    security = None
    if settings:
        try:
            security = from_settings(resolve(SECURITY_SETTINGS, settings, {}))
        except ConfigError as exc:
            raise CliError(f"--command-config {args.command_config}: {exc}") from exc
    args._security = security
    return security

"""Client configuration: Kafka-style dotted keys, or Python keyword arguments.

    Producer({"bootstrap.servers": "localhost:9092", "linger.ms": 5})
    Producer(bootstrap_servers="localhost:9092", linger_ms=5)

Both spellings mean the same key; keyword arguments win over the mapping. Unknown
keys and values of the wrong type raise :class:`ConfigError` naming the key, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rill.client.errors import RillError


class ConfigError(RillError, ValueError):
    """A setting that is unknown or has a bad value: a client's, or a broker's key, file or flag."""


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    doc: str
    parse: Callable[[Any], Any] | None = None  # converts/validates; raises ValueError or TypeError


def resolve(settings: tuple[Setting, ...], config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults, then ``config`` (dotted names), then ``kwargs`` (underscores for dots)."""
    known = {s.name: s for s in settings}
    values = {s.name: s.default for s in settings}
    supplied = dict(config or {})
    supplied.update({k.replace("_", "."): v for k, v in kwargs.items()})
    for name, value in supplied.items():
        setting = known.get(name)
        if setting is None:
            raise ConfigError(f"unknown setting {name!r}; known: {', '.join(sorted(known))}")
        try:
            values[name] = setting.parse(value) if setting.parse is not None else value
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"setting {name!r}: {exc}") from exc
    return values


def servers(value: Any) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` or a list of them -> [(host, port)]; port 9092 when omitted."""
    from rill.client.blocking_connection import parse_address

    items = value.split(",") if isinstance(value, str) else list(value)
    parsed = [parse_address(item.strip()) for item in items if str(item).strip()]
    if not parsed:
        raise ValueError("at least one host:port is needed")
    return parsed


def non_negative(kind: type) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if isinstance(value, bool):
            raise TypeError(f"expected a number, got {value!r}")
        number = kind(value)
        if number < 0:
            raise ValueError(f"must be >= 0, got {number}")
        return number
    return parse


def positive(kind: type) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        number = non_negative(kind)(value)
        if number == 0:
            raise ValueError("must be > 0")
        return number
    return parse


def choice(*options: Any) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(map(repr, options))}, got {value!r}")
        return value
    return parse


def optional_callable(value: Any) -> Any:
    """A callable, or None."""
    if value is not None and not callable(value):
        raise TypeError(f"expected a callable or None, got {value!r}")
    return value


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise TypeError(f"expected true or false, got {value!r}")

"""Quota keys: their names, units and values, shared by ``rill quotas`` and the broker.

Quotas are keys of the same entities that hold SCRAM credentials, Kafka's layout:
``users/<user>``, ``clients/<client-id>``, ``users/<user>/clients/<client-id>``, with
``<default>`` for "any user" or "any client id" that has no entity of its own (paths and
the store: rill.client.security.entity_configs). Values are stored as decimal strings,
as Kafka stores them.

The keys (the first three are Kafka's, with Kafka's meaning):

- ``producer_byte_rate``: bytes per second a quota group may produce to one broker.
- ``consumer_byte_rate``: bytes per second a quota group may fetch from one broker.
- ``request_percentage``: share of one broker's event-loop thread a quota group may
  use, in percent of that one thread (Kafka's is of one request handler thread; rill
  has one loop, so 100 is the whole broker's data plane). Over 0; above 100 only says
  "never throttle".
- ``partitions_created_max``: rill's own, a cap and not a rate: the most partitions a
  user may create in total, over every topic it creates. Kafka's nearest is
  ``controller_mutation_rate`` (partitions created or deleted per second, KIP-599). It
  applies to users only (``users/<user>`` or ``users/<default>``): the count the broker
  checks it against is kept per principal, never per client id.

A rate applies per broker and per quota group: every connection of the group shares
it (rill.broker.security.quota_manager resolves the group).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from rill.client.errors import RillError

__all__ = [
    "CONSUMER_BYTE_RATE", "PARTITIONS_CREATED", "PARTITIONS_CREATED_MAX", "PRODUCER_BYTE_RATE", "QUOTA_KEYS", "RATE_KEYS",
    "REQUEST_PERCENTAGE", "QuotaKey", "QuotaValueError", "format_quota", "parse_quota", "quota_key", "quotas_of",
]

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
PARTITIONS_CREATED_MAX = "partitions_created_max"
PARTITIONS_CREATED = "partitions_created"
"""Not a quota: the count of partitions a user has created, which partitions_created_max is checked
against (kept by the brokers in the user's entity; deleting it resets the count)."""


class QuotaValueError(RillError, ValueError):
    """A quota value that is not a positive number (the message names the key), or an unknown key."""


@dataclass(frozen=True, slots=True)
class QuotaKey:
    """One quota key.

    ``name`` is the entity key (Kafka's spelling); ``unit`` is for help texts and docs;
    ``integral`` keys take whole numbers only (the byte rates are longs in Kafka, so a
    value rill writes to ZooKeeper stays readable by ``kafka-configs``); ``users_only``
    keys are refused on an entity that names a client id.
    """

    name: str
    unit: str
    doc: str
    integral: bool = False
    users_only: bool = False


QUOTA_KEYS: tuple[QuotaKey, ...] = (
    QuotaKey(PRODUCER_BYTE_RATE, "bytes/s", "bytes per second produced to one broker, per quota group",
             integral=True),
    QuotaKey(CONSUMER_BYTE_RATE, "bytes/s", "bytes per second fetched from one broker, per quota group",
             integral=True),
    QuotaKey(REQUEST_PERCENTAGE, "%", "percent of one broker's event-loop thread, per quota group"),
    QuotaKey(PARTITIONS_CREATED_MAX, "partitions", "most partitions a user may create in total, over its topics",
             integral=True, users_only=True),
)
RATE_KEYS: tuple[str, ...] = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
"""The keys measured as rates over the quota windows (the others are caps)."""

_BY_NAME = {key.name: key for key in QUOTA_KEYS}


def quota_key(name: str) -> QuotaKey:
    """The :class:`QuotaKey` called ``name``.

    Raises:
        QuotaValueError: not a quota key (the message lists the known ones).
    """
    key = _BY_NAME.get(name)
    if key is None:
        raise QuotaValueError(f"unknown quota {name!r}; known: {', '.join(_BY_NAME)}")
    return key


def parse_quota(name: str, text: str | float) -> float:
    """The value of quota ``name`` from its stored text (or a number): a finite number over 0.

    Integral keys (the byte rates, ``partitions_created_max``) take whole numbers only.
    The value is returned as a float either way (a cap of 12 is ``12.0``).

    Raises:
        QuotaValueError: an unknown key, or a value that is not a positive (whole) number;
            the message names the key.
    """
    key = quota_key(name)
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise QuotaValueError(f"quota {name}: expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise QuotaValueError(f"quota {name}: expected a number > 0, got {text!r}")
    if key.integral and not value.is_integer():
        raise QuotaValueError(f"quota {name}: expected a whole number, got {text!r}")
    return value


def format_quota(value: float) -> str:
    """A quota value as it is stored: ``1024`` for a whole number, else the shortest float text."""
    return str(int(value)) if value.is_integer() else repr(value)


def quotas_of(config: Mapping[str, str]) -> tuple[dict[str, float], list[str]]:
    """The quotas among one entity's keys, and a message for each quota key with a bad value.

    Keys that are not quotas (SCRAM credentials) are skipped. Returns ``(quotas,
    problems)``: a stored value that does not parse is left out of ``quotas`` and
    described in ``problems`` (the broker logs it and goes on without that quota).
    """
    quotas: dict[str, float] = {}
    problems: list[str] = []
    for name, text in config.items():
        if name in _BY_NAME:
            try:
                quotas[name] = parse_quota(name, text)
            except QuotaValueError as exc:
                problems.append(str(exc))
    return quotas, problems

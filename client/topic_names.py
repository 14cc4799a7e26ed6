"""Topic name rules, shared by the broker (which makes directories of them) and clients.

A topic name is 1-249 characters of ``[A-Za-z0-9._-]`` and is neither ``.`` nor ``..``
(Kafka's rule: 249 leaves room for ``-`` and a partition number in a 255-byte file name).

Names that begin with ``__rill`` are rill's own internal topics (Kafka's ``__consumer_offsets``
convention): :data:`GROUPS_TOPIC` holds the group coordinators' state in a cluster. Clients
may read them but not create them or write to them (:func:`refuse_internal`).
"""

from __future__ import annotations

import re

from rill.client.errors import InvalidTopic

MAX_TOPIC_LENGTH = 249
INTERNAL_PREFIX = "__rill"
GROUPS_TOPIC = "__rill_groups"
_LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")


def is_valid_topic(name: str) -> bool:
    return bool(_LEGAL.match(name)) and name not in (".", "..")


def validate_topic(name: str) -> str:
    """Return ``name`` if it is a legal topic name; raise :class:`InvalidTopic` otherwise."""
    if not isinstance(name, str) or not is_valid_topic(name):
        raise InvalidTopic(f"invalid topic name {name!r}: use 1-{MAX_TOPIC_LENGTH} of [A-Za-z0-9._-], not '.' or '..'")
    return name


def is_internal_topic(name: str) -> bool:
    """Is ``name`` reserved for rill's internal topics (it begins with ``__rill``)?"""
    return name.startswith(INTERNAL_PREFIX)


def refuse_internal(name: str) -> str:
    """Return ``name`` unless it is an internal topic, which clients may not create or write to.

    Raises:
        InvalidTopic: ``name`` begins with ``__rill``.
    """
    if is_internal_topic(name):
        raise InvalidTopic(f"topic {name!r} is internal to rill (names beginning with {INTERNAL_PREFIX!r} are "
                           "reserved): it can be read but not created or written to")
    return name

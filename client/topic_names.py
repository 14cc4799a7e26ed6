"""Topic name rules, shared by the broker (which makes directories of them) and clients.

A topic name is 1-249 characters of ``[A-Za-z0-9._-]`` and is neither ``.`` nor ``..``
(Kafka's rule: 249 leaves room for ``-`` and a partition number in a 255-byte file name).
"""

from __future__ import annotations

import re

from rill.client.errors import InvalidTopic

MAX_TOPIC_LENGTH = 249
_LEGAL = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")


def is_valid_topic(name: str) -> bool:
    return bool(_LEGAL.match(name)) and name not in (".", "..")


def validate_topic(name: str) -> str:
    """Return ``name`` if it is a legal topic name; raise :class:`InvalidTopic` otherwise."""
    if not isinstance(name, str) or not is_valid_topic(name):
        raise InvalidTopic(f"invalid topic name {name!r}: use 1-{MAX_TOPIC_LENGTH} of [A-Za-z0-9._-], not '.' or '..'")
    return name

"""Users' SCRAM credentials, kept as keys of their ``users/<name>`` entity, as Kafka keeps them.

:class:`CredentialStore` works over any
:class:`~rill.client.security.entity_configs.EntityConfigs` (a broker's file, or ZooKeeper
for a cluster): the entity of user ``alice`` holds ``SCRAM-SHA-256`` (and ``SCRAM-SHA-512``
if set) mapped to the credential's text, ``salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=<n>``, beside any quota keys, which are left as they are. Passwords are never
stored; only what :func:`~rill.client.security.scram.make_credential` derives from them.

``lookup`` reads the store's in-memory copy, so a broker may call it for every
authentication. PLAIN checks passwords against the SCRAM-SHA-256 credential (rill.client.security.plain).
"""

from __future__ import annotations

import structlog

from rill.client.security.entity_configs import DEFAULT, USERS, EntityConfigError, EntityConfigs, entity_path
from rill.client.security.scram import DEFAULT_ITERATIONS, MECHANISMS, ScramCredential, ScramError, make_credential

__all__ = ["CredentialStore"]

log = structlog.get_logger(__name__)


def _mechanism(mechanism: str) -> str:
    if mechanism not in MECHANISMS:
        raise EntityConfigError(f"unknown SCRAM mechanism {mechanism!r}; use {' or '.join(MECHANISMS)}")
    return mechanism


def _user_entity(user: str) -> str:
    if user == DEFAULT:
        raise EntityConfigError(f"{DEFAULT} is the default user entity, it cannot have a password")
    return entity_path(user=user)


class CredentialStore:
    """SCRAM credentials per user and mechanism, in an entity-config store. Thread-safe as the store is."""

    def __init__(self, configs: EntityConfigs) -> None:
        self.configs = configs

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's credential for ``mechanism``, from memory.

        Returns None for an unknown user, a user without that mechanism, an invalid name or
        mechanism, and a stored credential that does not parse (logged): each then fails to
        authenticate like a wrong password.
        """
        if mechanism not in MECHANISMS:
            return None
        try:
            text = self.configs.get(_user_entity(user)).get(mechanism)
        except EntityConfigError:
            return None
        if text is None:
            return None
        try:
            return ScramCredential.from_text(mechanism, text)
        except ScramError as exc:
            log.error("scram.bad_stored_credential", user=user, mechanism=mechanism, error=str(exc))
            return None

    def set_password(self, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
                     iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        """Store a new credential of ``password`` (a fresh salt) for ``user`` and ``mechanism``,
        replacing that mechanism's old one and keeping the user's other keys.

        Raises:
            EntityConfigError: an invalid user name (or ``<default>``) or mechanism, an empty
                password, iterations outside 4096..16384, or a store that could not be written.
        """
        entity = _user_entity(user)
        try:
            credential = make_credential(_mechanism(mechanism), password, iterations)
        except ScramError as exc:
            raise EntityConfigError(str(exc)) from None
        self.configs.alter(entity, set={mechanism: credential.to_text()})
        return credential

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove the user's credential for ``mechanism`` (None: every SCRAM mechanism), keeping other keys.

        Returns:
            Whether there was one to remove (False for an unknown user).

        Raises:
            EntityConfigError: an invalid user name or mechanism, or a store that could not be written.
        """
        entity = _user_entity(user)
        wanted = MECHANISMS if mechanism is None else (_mechanism(mechanism),)
        present = [m for m in wanted if m in self.configs.get(entity)]
        if present:
            self.configs.alter(entity, delete=present)
        return bool(present)

    def users(self) -> dict[str, list[str]]:
        """Every user with a SCRAM credential and its mechanisms, sorted (never the credentials)."""
        found: dict[str, list[str]] = {}
        for user in self.configs.entities(USERS):
            if user == DEFAULT:
                continue
            mechanisms = [m for m in MECHANISMS if m in self.configs.get(entity_path(user=user))]
            if mechanisms:
                found[user] = mechanisms
        return found

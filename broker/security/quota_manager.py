"""Quota accounting: which quota group a request counts against, and how long to delay it.

Sans-IO: nothing here owns a socket or reads a clock. The event loop tells the
:class:`QuotaManager` what a client used, with the time (``now``, seconds of
``time.monotonic()``), and gets back a delay in seconds (0.0 when the client is within
quota). Kafka's model (``docs/design.html`` §4.10, KIP-13, KIP-124, KIP-219):

- **Quota groups.** For a request of ``(user, client_id)`` each quota type is looked up
  on its own in 8 entities, the first configured one winning::

      users/<user>/clients/<client-id>      users/<default>/clients/<client-id>
      users/<user>/clients/<default>        users/<default>/clients/<default>
      users/<user>                          users/<default>
                                            clients/<client-id>
                                            clients/<default>

  (down the first column, then the second). The group is that entity with each
  ``<default>`` replaced by the request's own name: a quota at ``users/alice`` is one
  group for every connection of alice whatever its client id; one at ``users/<default>``
  gives each user a group of its own. A client with no quota anywhere is not measured.
- **Rates** are measured per group over ``quota.window.num`` windows of
  ``quota.window.size.seconds`` (rill.broker.security.rate_windows). The usage is
  recorded first, then the rate is checked; over the quota, the delay is Kafka's
  ``(rate - quota) / quota * window``, the time after which the same total spread over
  the longer window is exactly the quota, capped at ``max_delay_s``.
- **The partition cap** (``partitions_created_max``) is looked up at ``users/<user>``,
  then ``users/<default>``; the count it is checked against is the caller's.

What the event loop calls, and when:

- after a PRODUCE or MULTIPRODUCE request is read: :meth:`QuotaManager.record_produce`
  with the request's size in bytes;
- after a FETCH or MULTIFETCH response is built: :meth:`QuotaManager.record_fetch` with
  the response's size in bytes (the response is sent whole, never emptied);
- after handling any request: :meth:`QuotaManager.record_request_time` with the seconds
  of loop time it took;
- then, with the largest of the delays above 0, it sends the response and mutes the
  connection (stops reading it) until ``now + delay`` (KIP-219). A Kafka 0.7 response
  has no throttle-time field: the mute is the whole mechanism, and nothing is refused.

Followers' replica fetches are not recorded: as in Kafka, replication is not a client
and client quotas do not slow it.

Thread-safety: the ``record_*`` methods and the lookups may be called from any thread;
the measured rates are guarded by one lock, taken only for a client that has a quota.
:meth:`QuotaManager.set_entity` (the config store's subscriber thread, through
:meth:`QuotaManager.follow`) builds a new configuration and swaps it in one assignment,
so a change takes effect at the next request, and drops the per-client resolution cache
with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import structlog

from rill.broker.security.rate_windows import SampledRate, WindowSettings
from rill.client.security.entity_configs import CLIENTS, DEFAULT, USERS, EntityConfigError, parse_entity
from rill.client.security.quota_keys import (CONSUMER_BYTE_RATE, PARTITIONS_CREATED_MAX, PRODUCER_BYTE_RATE,
                                             RATE_KEYS, REQUEST_PERCENTAGE, quota_key, quotas_of)

__all__ = ["EntityConfigSource", "QuotaManager", "QuotaSettings", "ResolvedQuota"]

log = structlog.get_logger(__name__)

_RATES = RATE_KEYS  # a resolution holds one quota per rate key, in this order
_PRODUCE, _FETCH, _REQUEST = (_RATES.index(name) for name in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE,
                                                                 REQUEST_PERCENTAGE))

# The 8 levels, most specific first: (user part, client part); "name" is the request's own name,
# "default" is <default>, None leaves the part out.
_LEVELS: tuple[tuple[str | None, str | None], ...] = (
    ("name", "name"), ("name", "default"), ("name", None),
    ("default", "name"), ("default", "default"), ("default", None),
    (None, "name"), (None, "default"),
)

MAX_CACHED_CLIENTS = 100_000
"""Resolutions kept per configuration; past it the cache starts over (client ids are the clients' to choose)."""


class EntityConfigSource(Protocol):
    """The part of an entity-config store (rill.client.security.entity_configs.EntityConfigs) quotas read.

    ``get(path)`` is an entity's keys (``{}`` for none); ``entities(type)`` lists names:
    of users for ``"users"``, of client ids for ``"clients"`` and for
    ``"users/<user>/clients"``; ``subscribe`` calls back with a changed entity's path.
    """

    def get(self, entity: str) -> Mapping[str, str]: ...

    def entities(self, entity_type: str) -> Iterable[str]: ...

    def subscribe(self, callback: Callable[[str], None]) -> object: ...


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    """The broker's quota settings: the rate windows (``quota.window.num``,
    ``quota.window.size.seconds``) and the longest delay one request may get."""

    windows: WindowSettings = field(default_factory=WindowSettings)
    max_delay_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.max_delay_s > 0:
            raise ValueError(f"the longest quota delay must be > 0 seconds, got {self.max_delay_s}")


class ResolvedQuota(NamedTuple):
    """One quota that applies to a client.

    ``entity``: where it is configured (``users/<default>``); ``group``: the quota group it
    is measured in, ``entity`` with the client's own names for ``<default>``
    (``users/alice``); ``value``: the quota.
    """

    entity: str
    group: str
    value: float


_Resolution = tuple[ResolvedQuota | None, ...]  # one per rate type, in _RATES order


class _Config:
    """One configuration, never changed once built: the quotas by entity, and the resolutions made from it."""

    __slots__ = ("entities", "configured", "any_rate", "cache")

    def __init__(self, entities: dict[str, dict[str, float]]) -> None:
        self.entities = entities
        self.configured = tuple(any(name in q for q in entities.values()) for name in _RATES)
        self.any_rate = any(self.configured)  # (read on every request: one attribute, no loop)
        self.cache: dict[tuple[str, str], _Resolution] = {}


def _join(user: str | None, client_id: str | None) -> str:
    parts = ([] if user is None else [USERS, user]) + ([] if client_id is None else [CLIENTS, client_id])
    return "/".join(parts)


def _level_paths(template: tuple[str | None, str | None], user: str, client_id: str) -> tuple[str, str]:
    """A level's entity path (``<default>`` where the level has it) and its group (the request's own names)."""
    user_part, client_part = template
    entity = _join(None if user_part is None else user if user_part == "name" else DEFAULT,
                   None if client_part is None else client_id if client_part == "name" else DEFAULT)
    group = _join(None if user_part is None else user, None if client_part is None else client_id)
    return entity, group


class QuotaManager:
    """Per-broker quota accounting for every client (see the module docstring)."""

    def __init__(self, settings: QuotaSettings | None = None) -> None:
        self.settings = settings if settings is not None else QuotaSettings()
        self._config = _Config({})
        self._config_lock = threading.Lock()  # serialises writers of _config
        self._reload_lock = threading.Lock()  # one store read-and-apply at a time, so the last read wins
        self._sensors: dict[tuple[int, str], SampledRate] = {}
        self._sensor_lock = threading.Lock()
        self._next_expiry = float("-inf")

    # ---------------------------------------------------------------- configuration

    def set_entity(self, entity: str, config: Mapping[str, str]) -> None:
        """Take ``entity``'s quotas from its keys ``config`` (all of them: keys it lacks have no quota).

        Keys that are not quotas are ignored, as are entities that are not quota entities.
        A bad value, or ``partitions_created_max`` on an entity naming a client id, is
        logged and left out; the rest of the entity still applies. Takes effect at the
        next request of every client.
        """
        try:
            _, client_id = parse_entity(entity)
        except EntityConfigError:
            return
        quotas, problems = quotas_of(config)
        for name in [n for n in quotas if client_id is not None and quota_key(n).users_only]:
            problems.append(f"quota {name} applies to users only, not to {entity}")
            del quotas[name]
        for problem in problems:
            log.warning("quota.ignored", entity=entity, problem=problem)
        with self._config_lock:
            entities = self._config.entities
            if entities.get(entity, {}) == quotas:
                return
            entities = {k: v for k, v in entities.items() if k != entity}
            if quotas:
                entities[entity] = quotas
            self._config = _Config(entities)
        log.info("quota.updated", entity=entity, quotas=quotas)

    def follow(self, source: EntityConfigSource) -> None:
        """Load every entity's quotas from ``source``, and apply its changes as they are announced.

        Subscribes first, so a change made during the load is applied after it; each
        change re-reads its entity from ``source`` (on the store's thread). A failed read
        is logged and the previous quotas stay.
        """
        source.subscribe(lambda entity: self._reload(source, entity))
        for entity in _entity_paths(source):
            self._reload(source, entity)

    def _reload(self, source: EntityConfigSource, entity: str) -> None:
        with self._reload_lock:
            try:
                config = source.get(entity)
            except Exception as exc:  # a store failure must not end the store's notifying thread
                log.warning("quota.reload_failed", entity=entity, error=str(exc) or type(exc).__name__)
                return
            self.set_entity(entity, config)

    @property
    def configured(self) -> bool:
        """Whether any rate quota is set anywhere (else every record_* returns 0 at once)."""
        return self._config.any_rate

    # ---------------------------------------------------------------- accounting

    def record_produce(self, user: str, client_id: str, nbytes: int, now: float) -> float:
        """Count ``nbytes`` produced by ``(user, client_id)`` at ``now``; return the delay in seconds (0.0: none).

        ``user`` is the principal's name (``alice`` for ``User:alice``, ``ANONYMOUS`` for a
        client that did not authenticate).
        """
        return self._record(_PRODUCE, user, client_id, nbytes, now)

    def record_fetch(self, user: str, client_id: str, nbytes: int, now: float) -> float:
        """Count ``nbytes`` of fetch responses to ``(user, client_id)``; return the delay in seconds."""
        return self._record(_FETCH, user, client_id, nbytes, now)

    def record_request_time(self, user: str, client_id: str, seconds: float, now: float) -> float:
        """Count ``seconds`` of event-loop time spent on a request of ``(user, client_id)``; return the delay.

        Measured in percent-seconds, so the rate is a percentage of the one loop thread.
        """
        return self._record(_REQUEST, user, client_id, seconds * 100.0, now)

    def _record(self, index: int, user: str, client_id: str, value: float, now: float) -> float:
        config = self._config  # one read: a change swapped in meanwhile applies from the next call
        if not config.configured[index]:
            return 0.0
        resolution = config.cache.get((user, client_id))
        if resolution is None:
            resolution = self._resolve(config, user, client_id)
        quota = resolution[index]
        if quota is None:
            return 0.0
        return self._measure(index, quota, value, now)

    def _measure(self, index: int, quota: ResolvedQuota, value: float, now: float) -> float:
        """Record ``value`` in the group's rate and return the delay that brings it back to ``quota``."""
        with self._sensor_lock:
            key = (index, quota.group)
            rate = self._sensors.get(key)
            if rate is None:
                rate = self._sensors[key] = SampledRate(self.settings.windows)
            rate.record(value, now)
            observed, window = rate.measure_with_window(now)
            if now >= self._next_expiry:
                self._expire(now)
        if observed <= quota.value:
            return 0.0
        return min((observed - quota.value) / quota.value * window, self.settings.max_delay_s)

    def _expire(self, now: float) -> None:
        """Forget the rates of groups idle for a whole window span (all their samples are obsolete:
        a new rate measures the same). Called with the sensor lock held, at most once per span."""
        span = self.settings.windows.span_s
        idle = [key for key, rate in self._sensors.items() if now - rate.last_recorded >= span]
        for key in idle:
            del self._sensors[key]
        self._next_expiry = now + span

    # ---------------------------------------------------------------- lookups

    def quotas_for(self, user: str, client_id: str) -> dict[str, ResolvedQuota]:
        """Every quota that applies to ``(user, client_id)``, by key; keys without one are absent."""
        config = self._config
        found = {name: quota for name, quota in zip(_RATES, self._resolve(config, user, client_id)) if quota}
        cap = self._partitions_cap(config, user)
        if cap is not None:
            found[PARTITIONS_CREATED_MAX] = cap
        return found

    def partitions_cap(self, user: str) -> int | None:
        """The most partitions ``user`` may create in total (set at ``users/<user>``, else at
        ``users/<default>``); None when neither has a cap."""
        cap = self._partitions_cap(self._config, user)
        return None if cap is None else int(cap.value)

    def may_create_partitions(self, user: str, count: int, already_created: int) -> bool:
        """Whether ``user``, which has created ``already_created`` partitions, may create ``count`` more."""
        cap = self.partitions_cap(user)
        return cap is None or already_created + count <= cap

    @staticmethod
    def _partitions_cap(config: _Config, user: str) -> ResolvedQuota | None:
        for entity in (f"{USERS}/{user}", f"{USERS}/{DEFAULT}"):
            value = config.entities.get(entity, {}).get(PARTITIONS_CREATED_MAX)
            if value is not None:
                return ResolvedQuota(entity, f"{USERS}/{user}", value)
        return None

    @staticmethod
    def _resolve(config: _Config, user: str, client_id: str) -> _Resolution:
        """Each rate type's quota for ``(user, client_id)``: the most specific level configured; cached."""
        found: list[ResolvedQuota | None] = [None] * len(_RATES)
        for template in _LEVELS:
            entity, group = _level_paths(template, user, client_id)
            quotas = config.entities.get(entity)
            if not quotas:
                continue
            for index, name in enumerate(_RATES):
                if found[index] is None and name in quotas:
                    found[index] = ResolvedQuota(entity, group, quotas[name])
        resolution = tuple(found)
        if len(config.cache) >= MAX_CACHED_CLIENTS:
            config.cache.clear()
        config.cache[(user, client_id)] = resolution
        return resolution


def _entity_paths(source: EntityConfigSource) -> list[str]:
    """Every entity of ``source``: ``entities`` lists names, of users, of a user's client ids, of client ids."""
    paths: list[str] = []
    for user in source.entities(USERS):
        paths.append(f"{USERS}/{user}")
        paths += [f"{USERS}/{user}/{CLIENTS}/{client}" for client in source.entities(f"{USERS}/{user}/{CLIENTS}")]
    paths += [f"{CLIENTS}/{client}" for client in source.entities(CLIENTS)]
    return paths

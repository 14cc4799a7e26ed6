"""Quota accounting: quota groups, Kafka's 8 levels, delays that hold clients to their quota, the partition cap."""

from __future__ import annotations

import threading

import pytest
from structlog.testing import capture_logs

from rill.broker.security.quota_manager import QuotaManager, QuotaSettings, ResolvedQuota
from rill.broker.security.rate_windows import WindowSettings
from rill.client.security.entity_configs import EntityConfigError, MemoryEntityConfigs

T0 = 5000.0
PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"


def simulate_producer(manager: QuotaManager, user: str, client_id: str, *, quota: float, seconds: float,
                      request_bytes: int, overdrive: float = 4.0, start: float = T0) -> float:
    """A producer with data always ready at ``overdrive`` times ``quota``, muted for each returned delay.

    It sends a request every ``request_bytes / (overdrive * quota)`` seconds unless the
    broker muted it for longer. Returns the bytes per second the broker took in.
    """
    interval = request_bytes / (overdrive * quota)
    now, sent = start, 0
    while now < start + seconds:
        delay = manager.record_produce(user, client_id, request_bytes, now)
        sent += request_bytes
        now += max(interval, delay)
    return sent / seconds


@pytest.mark.parametrize("request_bytes", [1_000, 5_000])
def test_a_producer_at_four_times_its_quota_is_held_to_it(request_bytes: int) -> None:
    """Pushing 4x a 100 KB/s quota for 30 s with the delays applied, the producer gets the quota within 10%.

    The windows are 11 x 0.1 s so that the burst Kafka's rate allows at the start (the
    first num - 1 windows' worth) is small beside 30 s; the defaults are checked below.
    """
    manager = QuotaManager(QuotaSettings(WindowSettings(num=11, size_s=0.1)))
    manager.set_entity("users/alice", {PRODUCE: "100000"})
    rate = simulate_producer(manager, "alice", "app", quota=100_000, seconds=30, request_bytes=request_bytes)
    assert rate == pytest.approx(100_000, rel=0.1)


def test_with_the_default_windows_a_producer_gets_its_quota_plus_the_first_burst() -> None:
    """With 11 x 1 s windows, 30 s of a 4x producer stay under the quota plus the 10 s of credit a new rate gives.

    Over 110 s (ten window spans) the burst is spread out and the rate is within 10% of the quota.
    """
    settings = QuotaSettings()
    manager = QuotaManager(settings)
    manager.set_entity("users/alice", {PRODUCE: "100000"})
    credit_s = (settings.windows.num - 1) * settings.windows.size_s
    rate = simulate_producer(manager, "alice", "app", quota=100_000, seconds=30, request_bytes=1000)
    assert 0.9 * 100_000 <= rate <= 100_000 * (30 + credit_s) / 30
    manager.set_entity("users/bob", {PRODUCE: "100000"})
    rate = simulate_producer(manager, "bob", "app", quota=100_000, seconds=110, request_bytes=1000)
    assert rate == pytest.approx(100_000, rel=0.1)


def test_an_unthrottled_client_is_never_delayed_beside_a_throttled_one() -> None:
    """While alice is held to her quota, bob (no quota at any level) gets delay 0 for every request."""
    manager = QuotaManager()
    manager.set_entity("users/alice", {PRODUCE: "1000"})
    now, alice_delays, bob_delays = T0, [], []
    while now < T0 + 30:
        alice_delays.append(manager.record_produce("alice", "app", 4000, now))
        bob_delays.append(manager.record_produce("bob", "app", 1_000_000, now))
        bob_delays.append(manager.record_fetch("bob", "app", 1_000_000, now))
        bob_delays.append(manager.record_request_time("bob", "app", 0.5, now))
        now += 0.25
    assert max(alice_delays) > 0
    assert set(bob_delays) == {0.0}
    assert manager.quotas_for("bob", "app") == {}


LEVELS = [
    ("users/alice/clients/app", "users/alice/clients/app"),
    ("users/alice/clients/<default>", "users/alice/clients/app"),
    ("users/alice", "users/alice"),
    ("users/<default>/clients/app", "users/alice/clients/app"),
    ("users/<default>/clients/<default>", "users/alice/clients/app"),
    ("users/<default>", "users/alice"),
    ("clients/app", "clients/app"),
    ("clients/<default>", "clients/app"),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_of_the_8_levels_wins(level: int) -> None:
    """With a quota at this level and at every less specific one, this level's applies, in its quota group."""
    manager = QuotaManager()
    for value, (entity, _) in enumerate(LEVELS[level:], start=level + 1):
        manager.set_entity(entity, {PRODUCE: str(value * 1000)})
    entity, group = LEVELS[level]
    assert manager.quotas_for("alice", "app") == {PRODUCE: ResolvedQuota(entity, group, (level + 1) * 1000.0)}


def test_each_quota_type_is_resolved_on_its_own() -> None:
    """A produce quota at users/alice does not hide a fetch quota at clients/<default>."""
    manager = QuotaManager()
    manager.set_entity("users/alice", {PRODUCE: "1000"})
    manager.set_entity("clients/<default>", {FETCH: "2000", "request_percentage": "50"})
    assert manager.quotas_for("alice", "app") == {
        PRODUCE: ResolvedQuota("users/alice", "users/alice", 1000.0),
        FETCH: ResolvedQuota("clients/<default>", "clients/app", 2000.0),
        "request_percentage": ResolvedQuota("clients/<default>", "clients/app", 50.0),
    }


def test_the_connections_of_one_user_share_its_quota() -> None:
    """With the quota at users/alice, alice's two client ids draw on one rate: the second is delayed at once."""
    manager = QuotaManager()
    manager.set_entity("users/alice", {PRODUCE: "1000"})
    assert manager.record_produce("alice", "one", 10_000, T0) == 0.0
    assert manager.record_produce("alice", "two", 1_000, T0) > 0.0


def test_a_default_quota_gives_each_user_a_group_of_its_own() -> None:
    """users/<default> applies to every user without an entity, each measured apart; users/bob overrides it."""
    manager = QuotaManager()
    manager.set_entity("users/<default>", {PRODUCE: "1000"})
    manager.set_entity("users/bob", {PRODUCE: "1000000"})
    assert manager.record_produce("alice", "app", 10_000, T0) == 0.0
    assert manager.record_produce("alice", "app", 1_000, T0) > 0.0
    assert manager.record_produce("carol", "app", 10_000, T0) == 0.0
    assert manager.record_produce("ANONYMOUS", "", 10_000, T0) == 0.0
    assert manager.record_produce("bob", "app", 100_000, T0) == 0.0


def test_client_id_quotas_apply_to_every_user() -> None:
    """clients/app limits that client id whoever runs it (ANONYMOUS too); clients/<default> each other id alone."""
    manager = QuotaManager()
    manager.set_entity("clients/app", {FETCH: "1000"})
    manager.set_entity("clients/<default>", {FETCH: "500"})
    assert manager.record_fetch("alice", "app", 10_000, T0) == 0.0
    assert manager.record_fetch("ANONYMOUS", "app", 1_000, T0) > 0.0  # one group: clients/app
    assert manager.record_fetch("ANONYMOUS", "other", 5_000, T0) == 0.0
    assert manager.record_fetch("ANONYMOUS", "third", 5_000, T0) == 0.0
    assert manager.quotas_for("bob", "other")[FETCH] == ResolvedQuota("clients/<default>", "clients/other", 500.0)


def test_the_delay_is_kafkas_formula_bounded_by_the_maximum() -> None:
    """Over the quota, the delay is (rate - quota) / quota * window; it never exceeds max_delay_s."""
    manager = QuotaManager(QuotaSettings(max_delay_s=15.0))
    manager.set_entity("users/alice", {PRODUCE: "1000"})
    # a new rate is divided by 10 windows: 20,000 bytes measure 2000 B/s, 1000 over the quota
    assert manager.record_produce("alice", "app", 20_000, T0) == pytest.approx((2000 - 1000) / 1000 * 10)
    assert manager.record_produce("alice", "app", 100_000, T0) == 15.0


def test_a_delay_brings_the_rate_back_to_the_quota() -> None:
    """Once the windows are full, waiting the returned delay puts the group's rate at its quota again, not before."""
    manager = QuotaManager()
    manager.set_entity("users/alice", {PRODUCE: "1000"})
    for second in range(12):
        assert manager.record_produce("alice", "app", 500, T0 + second) == 0.0
    now = T0 + 11.5
    delay = manager.record_produce("alice", "app", 5_300, now)  # 10,800 bytes over 10.5 s
    assert delay == pytest.approx(0.3)  # before the oldest window (T0 + 1) expires at T0 + 12
    assert manager.record_produce("alice", "app", 0, now + 0.9 * delay) > 0.0
    assert manager.record_produce("alice", "app", 0, now + delay) == pytest.approx(0.0, abs=1e-9)


def test_request_percentage_holds_a_client_to_its_share_of_the_loop() -> None:
    """A client whose requests take 0.1 s of loop time each, back to back, is held to a 25% quota."""
    manager = QuotaManager(QuotaSettings(WindowSettings(num=11, size_s=0.1)))
    manager.set_entity("users/alice", {"request_percentage": "25"})
    now, busy = T0, 0.0
    while now < T0 + 30:
        delay = manager.record_request_time("alice", "app", 0.01, now)
        busy += 0.01
        now += max(0.01, delay)
    assert busy / 30 == pytest.approx(0.25, rel=0.1)


def test_a_config_change_takes_effect_at_the_next_request() -> None:
    """Raising, lowering and deleting a quota change the very next delay: the resolution cache is dropped."""
    manager = QuotaManager()
    manager.set_entity("users/alice", {PRODUCE: "1000"})
    assert manager.record_produce("alice", "app", 20_000, T0) > 0.0
    manager.set_entity("users/alice", {PRODUCE: "1000000"})
    assert manager.record_produce("alice", "app", 1_000, T0) == 0.0
    manager.set_entity("users/alice", {PRODUCE: "100"})
    assert manager.record_produce("alice", "app", 1, T0) > 0.0
    manager.set_entity("users/alice", {})
    assert manager.record_produce("alice", "app", 1_000_000, T0) == 0.0
    manager.set_entity("users/<default>/clients/app", {PRODUCE: "10"})
    assert manager.quotas_for("alice", "app")[PRODUCE].entity == "users/<default>/clients/app"


def test_keys_that_are_not_quotas_and_bad_values_are_ignored() -> None:
    """SCRAM keys are skipped; a bad value or a user-only cap on a client entity is logged and left out."""
    manager = QuotaManager()
    with capture_logs() as logs:
        manager.set_entity("users/alice", {"SCRAM-SHA-256": "salt=x,iterations=4096", PRODUCE: "-5", FETCH: "2000"})
        manager.set_entity("clients/app", {"partitions_created_max": "3"})
        manager.set_entity("topics/t", {PRODUCE: "1"})
    assert manager.quotas_for("alice", "app") == {FETCH: ResolvedQuota("users/alice", "users/alice", 2000.0)}
    problems = [e["problem"] for e in logs if e["event"] == "quota.ignored"]
    assert len(problems) == 2
    assert "producer_byte_rate" in problems[0] and "users only" in problems[1]


def test_the_partition_cap_counts_what_the_user_created() -> None:
    """partitions_created_max at users/alice, else users/<default>, bounds created + requested partitions."""
    manager = QuotaManager()
    assert manager.may_create_partitions("alice", 1000, 0) and manager.partitions_cap("alice") is None
    manager.set_entity("users/alice", {"partitions_created_max": "10"})
    assert manager.may_create_partitions("alice", 4, 6)
    assert not manager.may_create_partitions("alice", 5, 6)
    assert manager.may_create_partitions("bob", 100, 100)
    manager.set_entity("users/<default>", {"partitions_created_max": "3"})
    assert manager.partitions_cap("bob") == 3 and manager.partitions_cap("alice") == 10
    assert not manager.may_create_partitions("ANONYMOUS", 4, 0)
    assert manager.quotas_for("bob", "app")["partitions_created_max"] == ResolvedQuota(
        "users/<default>", "users/bob", 3.0)


class FlakyStore(MemoryEntityConfigs):
    """The in-memory entity-config store, whose reads can be made to fail."""

    fail = False

    def get(self, entity: str) -> dict[str, str]:
        if self.fail:
            raise EntityConfigError("store unreachable")
        return super().get(entity)


def test_following_a_store_loads_it_and_applies_its_changes() -> None:
    """follow() reads every entity, then each announced change; a failed read keeps the quotas it had."""
    store = FlakyStore({"users/alice": {PRODUCE: "1000", "SCRAM-SHA-256": "salt=x"},
                        "users/bob/clients/app": {FETCH: "5"}, "clients/<default>": {FETCH: "7"}})
    manager = QuotaManager()
    manager.follow(store)
    assert manager.quotas_for("bob", "app")[FETCH] == ResolvedQuota("users/bob/clients/app",
                                                                    "users/bob/clients/app", 5.0)
    assert manager.quotas_for("alice", "x")[FETCH].value == 7.0
    store.alter("users/alice", {PRODUCE: "2000"})
    assert manager.quotas_for("alice", "app")[PRODUCE].value == 2000.0
    store.alter("users/<default>/clients/<default>", {PRODUCE: "9"})
    assert manager.quotas_for("carol", "app")[PRODUCE].value == 9.0
    store.fail = True
    with capture_logs() as logs:
        store.alter("users/alice", delete=[PRODUCE])
    assert manager.quotas_for("alice", "app")[PRODUCE].value == 2000.0
    assert [e["event"] for e in logs] == ["quota.reload_failed"]


def test_config_changes_from_another_thread_while_the_loop_records() -> None:
    """A thread swapping quotas while another records never breaks accounting; the last quota set applies."""
    manager = QuotaManager()
    stop = threading.Event()

    def flip() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            manager.set_entity("users/alice", {PRODUCE: str(1000 + n % 7)})
        manager.set_entity("users/alice", {PRODUCE: "123"})

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for i in range(20_000):
            assert manager.record_produce("alice", f"c{i % 50}", 10, T0 + i * 0.001) >= 0.0
    finally:
        stop.set()
        flipper.join()
    assert manager.quotas_for("alice", "c1")[PRODUCE].value == 123.0


def test_idle_groups_are_forgotten_without_changing_any_delay() -> None:
    """A group idle for a window span is measured as new: its old usage no longer counts."""
    manager = QuotaManager()
    manager.set_entity("users/<default>/clients/<default>", {PRODUCE: "1000"})
    for i in range(1000):
        manager.record_produce("alice", f"client-{i}", 100, T0)
    later = T0 + manager.settings.windows.span_s
    assert manager.record_produce("alice", "client-0", 10_000, later) == 0.0
    assert manager.record_produce("alice", "client-0", 1_000, later) > 0.0

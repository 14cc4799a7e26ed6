"""The authorizer follows Kafka's rules: super users, deny wins, implied Describe, allow.everyone.if.no.acl.found.

Run as a script for the micro-benchmark of authorize() with 100 and 10,000 ACLs::

    python3 -m tests.unit.security.test_authorizer
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

import pytest
from structlog.testing import capture_logs

from rill.broker.security.authorizer import Authorizer, parse_super_users
from rill.client.security.acl_store import MemoryAclStore
from rill.client.security.acls import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, Operation,
                                       PatternType, Permission, ResourcePattern, ResourceType)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = Permission.ALLOW, Permission.DENY
O = Operation
ALICE, BOB, EVERYONE = "User:alice", "User:bob", "User:*"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


def acl(permission: Permission, op: Operation, name: str = "orders", principal: str = ALICE, host: str = "*",
        kind: ResourceType = TOPIC, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern), AccessControlEntry(principal, host, op, permission))


def prefixed(permission: Permission, op: Operation, prefix: str, principal: str = ALICE,
             kind: ResourceType = TOPIC) -> AclBinding:
    return acl(permission, op, prefix, principal, kind=kind, pattern=PatternType.PREFIXED)


class Case(NamedTuple):
    why: str
    acls: list[AclBinding]
    op: Operation
    expected: bool
    name: str = "orders"
    kind: ResourceType = TOPIC
    principal: str = ALICE
    host: str = HOST
    allow_everyone: bool = False
    super_users: tuple[str, ...] = ()


CASES = [
    Case("no ACL, default: denied", [], O.READ, False),
    Case("no ACL, allow.everyone.if.no.acl.found: allowed", [], O.READ, True, allow_everyone=True),
    Case("allow-everyone: one ACL for bob closes the topic to alice", [acl(ALLOW, O.READ, principal=BOB)], O.READ,
         False, allow_everyone=True),
    Case("allow-everyone: an ACL on another topic leaves this one open", [acl(ALLOW, O.READ, "other", BOB)],
         O.WRITE, True, allow_everyone=True),
    Case("allow-everyone: a prefixed ACL covering the topic closes it", [prefixed(ALLOW, O.READ, "ord", BOB)],
         O.READ, False, allow_everyone=True),
    Case("allow-everyone: alice's own allow is needed for another operation", [acl(ALLOW, O.READ)], O.WRITE,
         False, allow_everyone=True),
    Case("literal allow", [acl(ALLOW, O.READ)], O.READ, True),
    Case("allow Read is not Write", [acl(ALLOW, O.READ)], O.WRITE, False),
    Case("allow All is Write", [acl(ALLOW, O.ALL)], O.WRITE, True),
    Case("allow All is Describe", [acl(ALLOW, O.ALL)], O.DESCRIBE, True),
    Case("allow Read implies Describe", [acl(ALLOW, O.READ)], O.DESCRIBE, True),
    Case("allow Write implies Describe", [acl(ALLOW, O.WRITE)], O.DESCRIBE, True),
    Case("allow Delete implies Describe", [acl(ALLOW, O.DELETE)], O.DESCRIBE, True),
    Case("allow Alter implies Describe", [acl(ALLOW, O.ALTER)], O.DESCRIBE, True),
    Case("allow Create does not imply Describe", [acl(ALLOW, O.CREATE)], O.DESCRIBE, False),
    Case("allow Describe does not imply Read", [acl(ALLOW, O.DESCRIBE)], O.READ, False),
    Case("allow AlterConfigs implies DescribeConfigs", [acl(ALLOW, O.ALTER_CONFIGS)], O.DESCRIBE_CONFIGS, True),
    Case("allow DescribeConfigs does not imply AlterConfigs", [acl(ALLOW, O.DESCRIBE_CONFIGS)], O.ALTER_CONFIGS,
         False),
    Case("allow AlterConfigs does not imply Describe", [acl(ALLOW, O.ALTER_CONFIGS)], O.DESCRIBE, False),
    Case("deny wins over allow", [acl(ALLOW, O.READ), acl(DENY, O.READ)], O.READ, False),
    Case("deny Describe denies Describe despite allow Read", [acl(ALLOW, O.READ), acl(DENY, O.DESCRIBE)],
         O.DESCRIBE, False),
    Case("deny Read does not deny Describe (no implied denies)", [acl(ALLOW, O.ALL), acl(DENY, O.READ)],
         O.DESCRIBE, True),
    Case("deny Write leaves Read", [acl(ALLOW, O.ALL), acl(DENY, O.WRITE)], O.READ, True),
    Case("deny All denies Read", [acl(ALLOW, O.READ), acl(DENY, O.ALL)], O.READ, False),
    Case("deny for bob does not touch alice", [acl(ALLOW, O.READ), acl(DENY, O.ALL, principal=BOB)], O.READ, True),
    Case("User:* allow applies to alice", [acl(ALLOW, O.READ, principal=EVERYONE)], O.READ, True),
    Case("User:* deny beats alice's allow", [acl(ALLOW, O.READ), acl(DENY, O.READ, principal=EVERYONE)], O.READ,
         False),
    Case("wildcard topic allow applies to every topic", [acl(ALLOW, O.READ, "*")], O.READ, True, name="anything"),
    Case("wildcard topic deny beats a literal allow", [acl(ALLOW, O.READ), acl(DENY, O.READ, "*")], O.READ, False),
    Case("prefixed allow covers a longer name", [prefixed(ALLOW, O.WRITE, "ord")], O.WRITE, True),
    Case("prefixed allow covers the prefix itself", [prefixed(ALLOW, O.WRITE, "orders")], O.WRITE, True),
    Case("prefixed allow does not cover a shorter name", [prefixed(ALLOW, O.WRITE, "orders-")], O.WRITE, False),
    Case("prefixed allow does not cover another name", [prefixed(ALLOW, O.WRITE, "pay")], O.WRITE, False),
    Case("prefixed deny beats a literal allow", [acl(ALLOW, O.READ), prefixed(DENY, O.READ, "o")], O.READ, False),
    Case("literal deny beats a prefixed allow", [prefixed(ALLOW, O.READ, "ord"), acl(DENY, O.READ)], O.READ, False),
    Case("prefixes of several lengths combine", [prefixed(ALLOW, O.ALL, "o"), prefixed(DENY, O.WRITE, "orde")],
         O.WRITE, False),
    Case("a deny on a longer prefix than the name does not apply",
         [prefixed(ALLOW, O.ALL, "o"), prefixed(DENY, O.WRITE, "orders-eu")], O.WRITE, True),
    Case("prefixed allow implies Describe", [prefixed(ALLOW, O.READ, "ord")], O.DESCRIBE, True),
    Case("host: allowed from the ACL's host", [acl(ALLOW, O.READ, host=HOST)], O.READ, True),
    Case("host: not from another host", [acl(ALLOW, O.READ, host=HOST)], O.READ, False, host=OTHER_HOST),
    Case("host: a deny from another host does not apply", [acl(ALLOW, O.READ), acl(DENY, O.READ, host=OTHER_HOST)],
         O.READ, True),
    Case("host: a deny from this host applies", [acl(ALLOW, O.READ), acl(DENY, O.READ, host=OTHER_HOST)],
         O.READ, False, host=OTHER_HOST),
    Case("host: IPv6", [acl(ALLOW, O.READ, host="::1")], O.READ, True, host="::1"),
    Case("super user needs no ACL", [], O.ALTER, True, super_users=(ALICE,)),
    Case("super user beats a deny", [acl(DENY, O.ALL)], O.READ, True, super_users=(ALICE,)),
    Case("super users are exact principals", [], O.READ, False, super_users=(BOB, "User:Alice")),
    Case("a topic ACL does not apply to the group of the same name", [acl(ALLOW, O.READ)], O.READ, False,
         kind=GROUP),
    Case("group Read", [acl(ALLOW, O.READ, "app", kind=GROUP)], O.READ, True, name="app", kind=GROUP),
    Case("group prefix", [prefixed(ALLOW, O.READ, "app-", kind=GROUP)], O.READ, True, name="app-1", kind=GROUP),
    Case("group Alter implies Describe", [acl(ALLOW, O.ALTER, "app", kind=GROUP)], O.DESCRIBE, True, name="app",
         kind=GROUP),
    Case("cluster ClusterAction", [acl(ALLOW, O.CLUSTER_ACTION, CLUSTER_NAME, kind=CLUSTER)], O.CLUSTER_ACTION, True,
         name=CLUSTER_NAME, kind=CLUSTER),
    Case("cluster Create does not allow Alter", [acl(ALLOW, O.CREATE, CLUSTER_NAME, kind=CLUSTER)], O.ALTER, False,
         name=CLUSTER_NAME, kind=CLUSTER),
]


@pytest.mark.parametrize("case", CASES, ids=[c.why for c in CASES])
def test_kafkas_rules(case: Case) -> None:
    """Each rule of Kafka's authorizer, one case a row."""
    authorizer = Authorizer(MemoryAclStore(case.acls), case.super_users, case.allow_everyone)
    assert authorizer.authorize(case.principal, case.host, case.op, case.kind, case.name) is case.expected
    # asked again: the cached answer is the same
    assert authorizer.authorize(case.principal, case.host, case.op, case.kind, case.name) is case.expected


def test_a_store_change_is_seen_by_the_next_call() -> None:
    """Adding and removing ACLs in the store changes the very next answer."""
    store = MemoryAclStore()
    authorizer = Authorizer(store)
    assert not authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "orders")
    store.add([acl(ALLOW, O.READ)])
    assert authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "orders")
    assert authorizer.acl_count == 1
    store.add([prefixed(DENY, O.READ, "ord")])
    assert not authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "orders")
    store.remove(AclBindingFilter(permission=DENY))
    assert authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "orders")


def test_readers_on_other_threads_see_whole_updates() -> None:
    """While the ACLs change 300 times, readers on four threads only ever see one of the two states."""
    store = MemoryAclStore()
    authorizer = Authorizer(store, allow_everyone_if_no_acl_found=True)
    # state A: no ACL (everyone allowed); state B: alice allowed and bob denied on both topics
    pair = [acl(ALLOW, O.READ, t) for t in ("a", "b")] + [acl(DENY, O.READ, t, BOB) for t in ("a", "b")]
    stop = threading.Event()
    wrong: list[str] = []

    def read() -> None:
        while not stop.is_set():
            if not authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "a"):
                wrong.append("alice refused")
            if not authorizer.authorize(BOB, HOST, O.WRITE, TOPIC, "b") and authorizer.acl_count not in (0, 4):
                wrong.append(f"an index of {authorizer.acl_count} ACLs")

    readers = [threading.Thread(target=read) for _ in range(4)]
    for r in readers:
        r.start()
    for _ in range(150):
        store.add(pair)
        store.remove(AclBindingFilter())
    stop.set()
    for r in readers:
        r.join()
    assert wrong == []


def test_denials_are_logged_once_per_question() -> None:
    """A denial is logged with who, what and where; asked again it comes from the cache, unlogged."""
    authorizer = Authorizer(MemoryAclStore([acl(ALLOW, O.READ, principal=BOB)]))
    with capture_logs() as logs:
        authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders")
        authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders")
        authorizer.authorize(BOB, HOST, O.READ, TOPIC, "orders")
    denied = [e for e in logs if e["event"] == "acl.denied"]
    assert len(denied) == 1
    assert denied[0]["principal"] == ALICE and denied[0]["operation"] == "WRITE" and denied[0]["acls_found"]


def test_super_users_and_acls_for() -> None:
    """super.users parses with semicolons; acls_for passes the store's listing through."""
    assert parse_super_users(" User:Bob; User:CN=alice,O=rill ;;") == {"User:Bob", "User:CN=alice,O=rill"}
    with pytest.raises(ValueError):
        parse_super_users("bob")
    store = MemoryAclStore([acl(ALLOW, O.READ), acl(ALLOW, O.READ, "x", kind=GROUP)])
    authorizer = Authorizer(store, parse_super_users("User:bob"))
    assert authorizer.is_super_user(BOB) and not authorizer.is_super_user(ALICE)
    assert authorizer.acls_for(AclBindingFilter(GROUP)) == [acl(ALLOW, O.READ, "x", kind=GROUP)]


# --- micro-benchmark -----------------------------------------------------------------

def benchmark_acls(count: int) -> list[AclBinding]:
    """``count`` ACLs of a plausible shape: per topic, a producer's and a consumer's allows; some prefixes and
    host-bound denies; a wildcard read for a monitoring user."""
    acls = [acl(ALLOW, O.DESCRIBE, "*", "User:monitor")]
    i = 0
    while len(acls) < count:
        topic = f"team{i % 50}.topic-{i}"
        acls += [acl(ALLOW, O.WRITE, topic, f"User:producer{i % 97}"), acl(ALLOW, O.READ, topic, ALICE)]
        if i % 10 == 0:
            acls.append(prefixed(ALLOW, O.READ, f"team{i % 50}.", f"User:reader{i}"))
        if i % 25 == 0:
            acls.append(acl(DENY, O.WRITE, topic, ALICE, host=OTHER_HOST))
        i += 1
    return acls[:count]


def time_authorize(count: int, calls: int = 200_000) -> tuple[float, float]:
    """ns per allowed authorize() call with ``count`` ACLs: (the same question again: cache hits; new questions,
    from 20,000 client addresses, more than the cache holds: misses)."""
    acls = benchmark_acls(count)
    authorizer = Authorizer(MemoryAclStore(acls))
    topics = sorted({b.pattern.name for b in acls if b.entry.principal == ALICE and b.entry.operation is O.READ})
    questions = [(f"10.0.{j // 256}.{j % 256}", topics[j % len(topics)]) for j in range(20_000)]
    start = time.perf_counter()
    for _ in range(calls):
        authorizer.authorize(ALICE, HOST, O.READ, TOPIC, topics[0])
    hit = (time.perf_counter() - start) / calls * 1e9
    start = time.perf_counter()
    for i in range(calls):
        host, topic = questions[i % len(questions)]
        authorizer.authorize(ALICE, host, O.READ, TOPIC, topic)
    miss = (time.perf_counter() - start) / calls * 1e9
    assert all(authorizer.authorize(ALICE, h, O.READ, TOPIC, t) for h, t in questions[:100])
    return hit, miss


def test_benchmark_prints_ns_per_call(capsys: pytest.CaptureFixture[str]) -> None:
    """A short run of the micro-benchmark (figures printed, not asserted: see the module docstring)."""
    for count in (100, 10_000):
        hit, miss = time_authorize(count, calls=20_000)
        with capsys.disabled():
            print(f"\nauthorize() with {count} ACLs: {hit:.0f} ns (cached), {miss:.0f} ns (uncached)")


if __name__ == "__main__":
    for n in (100, 10_000):
        cached, uncached = time_authorize(n)
        print(f"authorize() with {n:>6} ACLs: {cached:6.0f} ns/call cached, {uncached:6.0f} ns/call uncached")

"""SASL PLAIN (rill.client.security.plain): the message, its checks, and the password cache."""

from __future__ import annotations

import threading

import pytest

from rill.client.security.plain import (PasswordCache, PlainAuthenticationError, PlainError, authenticate_plain,
                                        check_password, parse_plain, plain_message)
from rill.client.security.scram import ScramCredential, make_credential

ALICE = make_credential("SCRAM-SHA-256", "alice-secret", 4096)


class CountingCredential:
    """Counts PBKDF2 runs by wrapping verify_password of the credential a lookup returns."""

    def __init__(self) -> None:
        self.runs = 0

    def make(self, password: str) -> ScramCredential:
        counter = self

        class Counted(ScramCredential):
            def verify_password(self, password: str) -> bool:
                counter.runs += 1
                return super().verify_password(password)

        base = make_credential("SCRAM-SHA-256", password, 4096)
        return Counted(base.mechanism, base.salt, base.stored_key, base.server_key, base.iterations)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_message_round_trip() -> None:
    """plain_message is NUL user NUL password, and parse_plain reads it back."""
    message = plain_message("alice", "pässword")
    assert message == b"\0alice\0p\xc3\xa4ssword"
    assert parse_plain(message) == ("alice", "pässword")


def test_authzid_equal_to_the_user_is_accepted() -> None:
    """An authorization id naming the user itself is allowed."""
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "pw")


@pytest.mark.parametrize("message, match", [
    (b"bob\0alice\0pw", "authorization id"),
    (b"\0alice", "authzid NUL user NUL password"),
    (b"\0alice\0pw\0extra", "authzid NUL user NUL password"),
    (b"\0\0pw", "user name"),
    (b"\0alice\0", "password"),
    (b"\0" + b"a" * 256 + b"\0pw", "user name"),
    (b"\0alice\0" + b"p" * 1100, "over 1024"),
    (b"\0al\xffice\0pw", "UTF-8"),
    (b"\0al\nice\0pw", "user name"),
])
def test_malformed_messages_are_refused(message: bytes, match: str) -> None:
    """Wrong shape, another identity, empty fields, non-UTF-8 or over 1 KiB: a PlainError (a ValueError)."""
    with pytest.raises(PlainError, match=match) as refused:
        parse_plain(message)
    assert isinstance(refused.value, ValueError)


def test_client_side_refusals() -> None:
    """The client will not build a message the server would refuse."""
    for user, password in [("", "pw"), ("alice", ""), ("al\0ice", "pw"), ("alice", "p\0w"), ("a" * 256, "pw"),
                           ("alice", "p" * 1100)]:
        with pytest.raises(PlainError):
            plain_message(user, password)


def test_authenticate_checks_against_the_scram_credential() -> None:
    """The right password gives the user name; a wrong one and an unknown user give the same error."""
    lookup = {"alice": ALICE}.get
    assert authenticate_plain(plain_message("alice", "alice-secret"), lookup) == "alice"
    with pytest.raises(PlainAuthenticationError) as wrong:
        authenticate_plain(plain_message("alice", "nope"), lookup)
    with pytest.raises(PlainAuthenticationError) as unknown:
        authenticate_plain(plain_message("mallory", "nope"), lookup)
    assert str(wrong.value) == str(unknown.value)


def test_cache_skips_pbkdf2_for_a_repeated_success() -> None:
    """A second check of the same name and password answers from the cache; a wrong password is never cached."""
    counting = CountingCredential()
    credential = counting.make("pw")
    cache = PasswordCache()
    assert check_password("alice", "pw", lambda _: credential, cache)
    assert check_password("alice", "pw", lambda _: credential, cache)
    assert counting.runs == 1
    assert not check_password("alice", "bad", lambda _: credential, cache)
    assert not check_password("alice", "bad", lambda _: credential, cache)
    assert counting.runs == 3 and len(cache) == 1


def test_cache_entries_expire() -> None:
    """After ttl_s the password is checked again."""
    counting = CountingCredential()
    credential = counting.make("pw")
    clock = Clock()
    cache = PasswordCache(ttl_s=10.0, clock=clock)
    cache.verify("alice", "pw", credential)
    clock.now += 9.9
    cache.verify("alice", "pw", credential)
    assert counting.runs == 1
    clock.now += 0.2
    cache.verify("alice", "pw", credential)
    assert counting.runs == 2


def test_cache_does_not_outlive_a_changed_credential() -> None:
    """A new password (a new credential) or a deleted user makes the cached success worthless."""
    cache = PasswordCache()
    old = make_credential("SCRAM-SHA-256", "old", 4096)
    new = make_credential("SCRAM-SHA-256", "new", 4096)
    assert cache.verify("alice", "old", old)
    assert not cache.verify("alice", "old", new)
    assert not cache.verify("alice", "old", None)
    assert cache.verify("alice", "new", new)


def test_cache_is_bounded_and_keeps_no_password() -> None:
    """Beyond max_entries the least recently used goes; keys hold a keyed hash, not the password."""
    cache = PasswordCache(max_entries=2)
    for name in ("a", "b", "c"):
        cache.verify(name, "alice-secret", ALICE)
    assert len(cache) == 2
    assert all("alice-secret" not in repr(key) for key in cache._entries)
    cache.invalidate("c")
    assert len(cache) == 1
    cache.invalidate()
    assert len(cache) == 0


def test_cache_is_thread_safe() -> None:
    """Many threads checking at once agree and leave the cache consistent."""
    cache = PasswordCache(max_entries=4)
    results: list[bool] = []

    def check(i: int) -> None:
        results.append(cache.verify(f"user{i % 6}", "alice-secret", ALICE))

    threads = [threading.Thread(target=check, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 24 and len(cache) <= 4


def test_cache_rejects_bad_settings() -> None:
    """No room or no lifetime is a ValueError."""
    with pytest.raises(ValueError):
        PasswordCache(max_entries=0)
    with pytest.raises(ValueError):
        PasswordCache(ttl_s=0)

"""SCRAM-SHA-256/512 (rill.client.security.scram): the RFC 7677 vector, whole exchanges, and refusals."""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest

from rill.client.security.scram import (MECHANISMS, ScramAuthenticationError, ScramClient, ScramCredential,
                                        ScramError, ScramServer, make_credential)

SECRET = b"mock-secret-for-tests-0123456789"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_NONCE = RFC_CLIENT_NONCE + RFC_SERVER_NONCE
MIN = 4096  # the fewest iterations allowed: quick tests


def users(mechanism: str, **passwords: str) -> Callable[[str], ScramCredential | None]:
    creds = {name: make_credential(mechanism, pw, MIN) for name, pw in passwords.items()}
    return creds.get


def exchange(client: ScramClient, server: ScramServer) -> None:
    server_final = server.step(client.final_message(server.step(client.first_message())))
    client.verify_server_final(server_final)


def test_rfc7677_vector_client_side() -> None:
    """The client reproduces RFC 7677's client-final and accepts its server-final."""
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = f"r={RFC_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    assert client.final_message(server_first) == (
        f"c=biws,r={RFC_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode())
    client.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert client.done


def test_rfc7677_vector_server_side() -> None:
    """The server, holding only the credential, answers RFC 7677's messages byte for byte."""
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, salt=RFC_SALT)
    server = ScramServer("SCRAM-SHA-256", {"user": credential}.get, SECRET, nonce=RFC_SERVER_NONCE)
    assert server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        f"r={RFC_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode())
    final = f"c=biws,r={RFC_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode()
    assert server.step(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.done and server.authenticated and server.username == "user"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_full_exchange(mechanism: str) -> None:
    """A client with the right password authenticates, and verifies the server in turn."""
    client = ScramClient(mechanism, "alice", "alice-secret")
    server = ScramServer(mechanism, users(mechanism, alice="alice-secret"), SECRET)
    exchange(client, server)
    assert server.authenticated and server.username == "alice" and client.done


def test_names_with_comma_and_equals_are_escaped() -> None:
    """``,`` and ``=`` travel as =2C and =3D and arrive as themselves."""
    name = "a,b=c"
    client = ScramClient("SCRAM-SHA-256", name, "pw")
    first = client.first_message()
    assert b"n=a=2Cb=3Dc," in first
    server = ScramServer("SCRAM-SHA-256", users("SCRAM-SHA-256", **{name: "pw"}), SECRET)
    server_final = server.step(client.final_message(server.step(first)))
    client.verify_server_final(server_final)
    assert server.username == name


def test_authzid_equal_to_the_user_is_accepted() -> None:
    """``n,a=alice,`` names the user itself: allowed, and the channel binding must repeat that header."""
    lookup = users("SCRAM-SHA-256", alice="pw")
    server = ScramServer("SCRAM-SHA-256", lookup, SECRET, nonce="S")
    server_first = server.step(b"n,a=alice,n=alice,r=C").decode()
    credential = lookup("alice")
    assert credential is not None and server_first == f"r=CS,s={base64.b64encode(credential.salt).decode()},i={MIN}"


def test_wrong_password_fails_at_the_proof() -> None:
    """A wrong password is refused at the client-final with ScramAuthenticationError (e=invalid-proof)."""
    client = ScramClient("SCRAM-SHA-256", "alice", "wrong")
    server = ScramServer("SCRAM-SHA-256", users("SCRAM-SHA-256", alice="right"), SECRET)
    final = client.final_message(server.step(client.first_message()))
    with pytest.raises(ScramAuthenticationError) as failed:
        server.step(final)
    assert failed.value.server_final == b"e=invalid-proof"
    assert server.done and not server.authenticated


def failure(user: str, password: str) -> tuple[str, bytes, str]:
    client = ScramClient("SCRAM-SHA-256", user, password)
    server = ScramServer("SCRAM-SHA-256", users("SCRAM-SHA-256", alice="right"), SECRET)
    server_first = server.step(client.first_message()).decode()
    with pytest.raises(ScramAuthenticationError) as failed:
        server.step(client.final_message(server_first.encode()))
    return str(failed.value), failed.value.server_final, server_first


def test_unknown_user_fails_like_a_wrong_password() -> None:
    """An unknown user gets a server-first like a real one's (salt of the same size, same iterations) and
    the same error at the proof step; a wrong password and an unknown user cannot be told apart."""
    wrong_message, wrong_final, real_first = failure("alice", "wrong")
    unknown_message, unknown_final, fake_first = failure("mallory", "whatever")
    assert (unknown_message, unknown_final) == (wrong_message, wrong_final)
    assert "unknown" not in unknown_message and "wrong password" not in unknown_message
    real_salt = real_first.split(",")[1]
    fake_salt = fake_first.split(",")[1]
    assert len(base64.b64decode(real_salt[2:])) == len(base64.b64decode(fake_salt[2:]))
    assert fake_first.split(",")[2] == "i=8192"


def test_unknown_users_salt_is_stable_per_name() -> None:
    """The fake salt of a name is the same every time (a real salt does not change either) and differs by name."""
    def salt(name: str, secret: bytes = SECRET) -> str:
        server = ScramServer("SCRAM-SHA-256", lambda _: None, secret)
        return server.step(f"n,,n={name},r=abc".encode()).decode().split(",")[1]

    assert salt("mallory") == salt("mallory")
    assert salt("mallory") != salt("eve")
    assert salt("mallory") != salt("mallory", secret=b"another-secret-0123456789")


def test_server_signature_tampered_is_rejected_by_the_client() -> None:
    """The client refuses a server-final whose signature is not the server key's."""
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server = ScramServer("SCRAM-SHA-256", users("SCRAM-SHA-256", alice="pw"), SECRET)
    server_final = server.step(client.final_message(server.step(client.first_message())))
    signature = bytearray(base64.b64decode(server_final[2:]))
    signature[0] ^= 1
    with pytest.raises(ScramAuthenticationError, match="signature"):
        client.verify_server_final(b"v=" + base64.b64encode(bytes(signature)))


def test_client_reports_a_server_error() -> None:
    """``e=invalid-proof`` from the server is an authentication error at the client."""
    client = ScramClient("SCRAM-SHA-256", "alice", "pw", nonce="C")
    client.first_message()
    client.final_message(f"r=CS,s={base64.b64encode(b'salt').decode()},i=4096".encode())
    with pytest.raises(ScramAuthenticationError, match="invalid-proof"):
        client.verify_server_final(b"e=invalid-proof")


@pytest.mark.parametrize("server_first, match", [
    (b"r=XS,s=c2FsdA==,i=4096", "nonce"),           # does not start with the client's
    (b"r=C,s=c2FsdA==,i=4096", "nonce"),            # adds nothing to it
    (b"r=CS,s=c2FsdA==,i=4095", "iterations"),      # below Kafka's minimum
    (b"r=CS,s=c2FsdA==,i=1000000", "iterations"),   # above Kafka's maximum
    (b"r=CS,s=c2FsdA==,i=x", "iteration"),
    (b"r=CS,s=***,i=4096", "base64"),
    (b"s=c2FsdA==,r=CS,i=4096", "malformed"),
    (b"m=ext,r=CS,s=c2FsdA==,i=4096", "extension"),
    (b"r=CS" + b"x" * 1100 + b",s=c2FsdA==,i=4096", "over"),
])
def test_client_refuses_bad_server_first(server_first: bytes, match: str) -> None:
    """The client checks the server's nonce, iteration count and encoding."""
    client = ScramClient("SCRAM-SHA-256", "alice", "pw", nonce="C")
    client.first_message()
    with pytest.raises(ScramError, match=match):
        client.final_message(server_first)


@pytest.mark.parametrize("message, match", [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
    (b"n,a=bob,n=alice,r=abc", "authorization id"),
    (b"n,,n=alice", "malformed"),
    (b"n,,r=abc,n=alice", "malformed"),
    (b"n,,n=,r=abc", "user name"),
    (b"n,,n=a=41,r=abc", "=2C or =3D"),
    (b"n,,n=" + b"a" * 256 + b",r=abc", "user name"),
    (b"n,,n=alice,r=a,b", "malformed"),
    (b"n,,n=alice,r=", "nonce"),
    (b"n,,m=x,n=alice,r=abc", "extensions"),
    (b"n,,n=\xff,r=abc", "UTF-8"),
    (b"nope", "GS2"),
    (b"n,,n=alice,r=" + b"a" * 1020, "over 1024"),
])
def test_server_refuses_malformed_client_first(message: bytes, match: str) -> None:
    """Malformed, oversized or unsupported client-first messages are ScramError, before any lookup."""
    looked_up: list[str] = []

    def lookup(name: str) -> ScramCredential | None:
        looked_up.append(name)
        return None

    server = ScramServer("SCRAM-SHA-256", lookup, SECRET)
    with pytest.raises(ScramError, match=match):
        server.step(message)
    assert server.done and looked_up == []


def started(nonce: str = "S") -> tuple[ScramClient, ScramServer, bytes]:
    client = ScramClient("SCRAM-SHA-256", "alice", "pw", nonce="C")
    server = ScramServer("SCRAM-SHA-256", users("SCRAM-SHA-256", alice="pw"), SECRET, nonce=nonce)
    return client, server, server.step(client.first_message())


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.replace(b"c=biws", b"c=eSws"), "channel binding"),     # "y,," where "n,," was sent
    (lambda m: m.replace(b"r=CS", b"r=CX"), "nonce"),
    (lambda m: m.split(b",p=")[0], "no proof"),
    (lambda m: m.split(b",p=")[0] + b",p=AAAA", "length"),
    (lambda m: m.split(b",p=")[0] + b",p=!!", "base64"),
    (lambda m: m.replace(b"c=biws,", b""), "malformed"),
    (lambda m: m + b"x" * 1100, "over"),
])
def test_server_refuses_malformed_client_final(edit: Callable[[bytes], bytes], match: str) -> None:
    """A client-final with another binding or nonce, or a malformed proof, is a ScramError."""
    client, server, server_first = started()
    with pytest.raises(ScramError, match=match):
        server.step(edit(client.final_message(server_first)))
    assert server.done and not server.authenticated


def test_no_step_after_done() -> None:
    """Once the exchange ended, successfully or not, every further step is refused."""
    client, server, server_first = started()
    server.step(client.final_message(server_first))
    with pytest.raises(ScramError, match="over"):
        server.step(b"n,,n=alice,r=again")
    failed = ScramServer("SCRAM-SHA-256", lambda _: None, SECRET)
    with pytest.raises(ScramError):
        failed.step(b"garbage")
    with pytest.raises(ScramError, match="over"):
        failed.step(b"n,,n=alice,r=abc")


def test_client_steps_in_order_once() -> None:
    """The client's three calls go in order, once each."""
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    with pytest.raises(ScramError):
        client.final_message(b"r=x,s=c2FsdA==,i=4096")
    client2 = ScramClient("SCRAM-SHA-256", "alice", "pw")
    client2.first_message()
    with pytest.raises(ScramError):
        client2.first_message()


def test_credential_text_round_trip_in_kafkas_format() -> None:
    """to_text is Kafka's ``salt=,stored_key=,server_key=,iterations=``, and from_text reads it back."""
    credential = make_credential("SCRAM-SHA-512", "pw", 4096, salt=b"0123456789abcdef")
    text = credential.to_text()
    assert [part.split("=", 1)[0] for part in text.split(",")] == ["salt", "stored_key", "server_key", "iterations"]
    assert text.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,") and text.endswith(",iterations=4096")
    assert ScramCredential.from_text("SCRAM-SHA-512", text) == credential
    assert "stored_key" not in repr(credential) and "server_key" not in repr(credential)


@pytest.mark.parametrize("text", [
    "salt=AAAA,stored_key=AAAA,server_key=AAAA",
    "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=10",
    "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=x",
    "salt=*,stored_key=AAAA,server_key=AAAA,iterations=4096",
    "salt=AAAA,salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096",
    "garbage",
])
def test_credential_text_refused(text: str) -> None:
    """A stored credential missing a field, with bad base64 or too few iterations, is a ScramError."""
    with pytest.raises(ScramError):
        ScramCredential.from_text("SCRAM-SHA-256", text)


def test_verify_password() -> None:
    """verify_password derives the stored key with the credential's own salt and iterations."""
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, salt=RFC_SALT)
    assert credential.verify_password("pencil")
    assert not credential.verify_password("pencil ")


def test_make_credential_refusals() -> None:
    """Fewer than 4096 iterations (Kafka's minimum), an unknown mechanism or an empty password are refused;
    each credential gets its own random salt."""
    with pytest.raises(ScramError, match="4096"):
        make_credential("SCRAM-SHA-256", "pw", 4095)
    with pytest.raises(ScramError, match="mechanism"):
        make_credential("SCRAM-SHA-1", "pw", 4096)
    with pytest.raises(ScramError, match="empty"):
        make_credential("SCRAM-SHA-256", "", 4096)
    assert make_credential("SCRAM-SHA-256", "pw", 4096).salt != make_credential("SCRAM-SHA-256", "pw", 4096).salt


def test_mechanism_mismatch_is_an_unknown_user() -> None:
    """A lookup returning another mechanism's credential is treated as no credential."""
    other = make_credential("SCRAM-SHA-512", "pw", MIN)
    client = ScramClient("SCRAM-SHA-256", "alice", "pw")
    server = ScramServer("SCRAM-SHA-256", lambda _: other, SECRET)
    final = client.final_message(server.step(client.first_message()))
    with pytest.raises(ScramAuthenticationError):
        server.step(final)

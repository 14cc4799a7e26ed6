"""CLIENT_HELLO (13): a client names itself (its ``client.id``) once, after connecting.

Kafka's requests carry the client id in every header; Kafka 0.7's carry none, and
rill keeps 0.7's frames byte-exact. So rill's clients send their ``client.id`` once per
connection, right after it is set up (after TLS and SASL, before any other request):
``CLIENT_ID string16`` (1 to 255 printable characters). The response is only the error
code: 0, or InvalidRequest for a malformed id (the connection stays open, unnamed).

The broker keeps the id for the connection's life: client quotas of
``clients/<client-id>`` and ``users/<user>/clients/<client-id>`` apply to it (a
connection that never sends one is the default client id, as every Kafka 0.7 client is).
"""

from __future__ import annotations

from typing import NamedTuple

from rill.client.protocol.framing import INT16, INT32, Reader, string16

__all__ = ["CLIENT_HELLO", "ClientHelloRequest", "MAX_CLIENT_ID", "decode_client_hello", "encode_client_hello",
           "valid_client_id"]

CLIENT_HELLO = 13
MAX_CLIENT_ID = 255


class ClientHelloRequest(NamedTuple):
    client_id: str


def valid_client_id(client_id: str) -> bool:
    """1 to 255 printable characters, without ``/`` (quota entities are paths)."""
    return 0 < len(client_id) <= MAX_CLIENT_ID and client_id.isprintable() and "/" not in client_id


def decode_client_hello(r: Reader) -> ClientHelloRequest:
    return ClientHelloRequest(r.string16())


def encode_client_hello(client_id: str) -> bytes:
    body = INT16.pack(CLIENT_HELLO) + string16(client_id)
    return INT32.pack(len(body)) + body

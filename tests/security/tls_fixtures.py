"""Throwaway certificates for the TLS tests (rill.client.security.throwaway_certs), written once per test."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from rill.client.security.throwaway_certs import issue, make_ca, write_pair


@dataclass(frozen=True)
class Certs:
    directory: Path

    def path(self, name: str) -> str:
        return str(self.directory / name)

    @property
    def ca(self) -> str:
        return self.path("ca.pem")

    def broker_settings(self, client_auth: str = "none") -> dict[str, str]:
        return {"ssl.certfile": self.path("broker.pem"), "ssl.keyfile": self.path("broker.key"),
                "ssl.cafile": self.ca, "ssl.client.auth": client_auth}

    def client(self, name: str) -> dict[str, str]:
        """A client's TLS settings with its own certificate (alice, expired, stranger) or none ("")."""
        settings = {"security.protocol": "SSL", "ssl.cafile": self.ca}
        if name:
            settings.update({"ssl.certfile": self.path(f"{name}.pem"), "ssl.keyfile": self.path(f"{name}.key")})
        return settings


def make_certs(directory: Path) -> Certs:
    """A CA, a broker certificate for localhost/127.0.0.1, client certificates alice (good), expired, and
    stranger (from another CA), and other-ca.pem (a CA that signed nothing here)."""
    ca = make_ca()
    write_pair(ca, directory, "ca")
    write_pair(issue(ca, "broker"), directory, "broker")
    write_pair(issue(ca, "alice", server=False), directory, "alice")
    long_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=10)
    write_pair(issue(ca, "expired", server=False, not_before=long_ago, days=1), directory, "expired")
    other = make_ca("other-ca")
    write_pair(other, directory, "other-ca")
    write_pair(issue(other, "stranger", server=False), directory, "stranger")
    return Certs(directory)

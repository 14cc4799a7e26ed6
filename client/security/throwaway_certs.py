"""Throwaway certificates for tests and for trying TLS: a CA, a broker certificate, client certificates.

``rill certs create DIR`` (rill.client.cli.certs) writes them as PEM files, so that the
TLS quickstart in docs/security.md is copy-paste; tests use the functions directly
(an expired certificate, one from another CA). Keys are ECDSA P-256, certificates
SHA-256, with the extensions strict verifiers want (key identifiers, key usage, the
names a broker is reached by as subject alternative names).

These are for development: the CA key is written next to the certificates, without a
passphrase. Production brokers take certificates from the organisation's own CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "issue", "make_ca", "write_pair"]


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(common_name: str, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             not_before: dt.datetime, days: float) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_before + dt.timedelta(days=days)))


def make_ca(common_name: str = "rill-test-ca", days: float = 365) -> Issued:
    """A self-signed CA valid from five minutes ago for ``days``."""
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        _builder(common_name, _name(common_name), key.public_key(), _now() - dt.timedelta(minutes=5), days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256()))
    return Issued(key, certificate)


def issue(ca: Issued, common_name: str, *, server: bool = True, names: Sequence[str] = ("localhost", "127.0.0.1"),
          not_before: dt.datetime | None = None, days: float = 365) -> Issued:
    """A certificate for ``common_name`` signed by ``ca``.

    ``server``: for a broker (server authentication, ``names`` as subject alternative
    names: host names and IP addresses); otherwise for a client (client authentication;
    its common name is its principal, ``User:<common_name>``); a broker's certificate is good for
    client authentication too, as brokers are clients of each other. ``not_before`` in the past
    with few ``days`` makes an expired certificate.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    # a broker's certificate also authenticates it as a client of other brokers (replication, the controller)
    usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (_builder(common_name, ca.certificate.subject, key.public_key(),
                        not_before or _now() - dt.timedelta(minutes=5), days)
               .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if server:
        alternatives: list[x509.GeneralName] = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


def write_pair(issued: Issued, directory: str | Path, stem: str) -> tuple[Path, Path]:
    """Write ``<stem>.pem`` and ``<stem>.key`` (the key readable by its owner only); return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    certificate_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    certificate_path.write_bytes(issued.certificate_pem())
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as f:
        f.write(issued.key_pem())
    return certificate_path, key_path

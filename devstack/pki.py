"""Throwaway certificates for a local Kafka listener over TLS (the tests, ``loadtest.bench_kafka
--security``): a certificate authority, a server certificate for 127.0.0.1 and localhost, a
client certificate, and a second authority with a client of its own, as PEM files. Keys are
P-256, valid for 30 days, unencrypted: for a local stack, never for a deployment."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    ca: str
    """The authority's certificate (what clients trust, and what signs client certificates)."""
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str
    """An authority that signed none of these (a client trusting only it refuses the server)."""
    other_client_cert: str
    other_client_key: str
    """A client certificate signed by ``other_ca``."""

    @property
    def broker_env(self) -> dict[str, str]:
        """A broker's settings for a Kafka listener with this server certificate."""
        return {"LLOG_KAFKA_TLS_CERT": self.server_cert, "LLOG_KAFKA_TLS_KEY": self.server_key}

    def librdkafka(self, protocol: str = "SSL") -> dict[str, str]:
        """librdkafka's settings to reach that listener (``protocol``: SSL or SASL_SSL)."""
        return {"security.protocol": protocol, "ssl.ca.location": self.ca}


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llog")])


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool, san: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate | None = None, key=None) -> str:
    data = b""
    if cert is not None:
        data += cert.public_bytes(serialization.Encoding.PEM)
    if key is not None:
        data += key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    path.write_bytes(data)
    return str(path)


def make_pki(directory: Path) -> Pki:
    """Fresh keys and certificates written under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("llog test CA", ca_key, _name("llog test CA"), ca_key, ca=True)
    other = _cert("another CA", other_key, _name("another CA"), other_key, ca=True)
    server_key, client_key, stranger_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    server = _cert("localhost", server_key, ca.subject, ca_key, ca=False, san=True)
    client = _cert("client-1", client_key, ca.subject, ca_key, ca=False)
    stranger = _cert("stranger", stranger_key, other.subject, other_key, ca=False)
    return Pki(
        ca=_write(directory / "ca.pem", ca), server_cert=_write(directory / "server.pem", server),
        server_key=_write(directory / "server-key.pem", key=server_key),
        client_cert=_write(directory / "client.pem", client),
        client_key=_write(directory / "client-key.pem", key=client_key),
        other_ca=_write(directory / "other-ca.pem", other),
        other_client_cert=_write(directory / "stranger.pem", stranger),
        other_client_key=_write(directory / "stranger-key.pem", key=stranger_key),
    )

"""Real certificates for the extender's TLS tests: a CA, a server certificate for 127.0.0.1 and
client certificates, written as PEM files (the `cryptography` package)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: str  # PEM file paths
    key: str


@dataclass
class Authority:
    name: str
    folder: Path

    def __post_init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])
        self.certificate = (
            self._builder(subject, self.key.public_key(), subject)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert = str(self.folder / f"{self.name}.crt")
        Path(self.cert).write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey, issuer: x509.Name
    ) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def issue(self, common_name: str, *, server: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = self._builder(subject, key.public_key(), self.certificate.subject)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        stem = self.folder / f"{self.name}-{common_name.replace(':', '_')}"
        Path(f"{stem}.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        Path(f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return Issued(f"{stem}.crt", f"{stem}.key")

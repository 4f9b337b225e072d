"""Who may call the extender, and the TLS it is served over.

`/extender/bind` creates a Binding for any pod on any node with GPU ids of our choosing, so no
verb answers an unauthenticated caller. kube-scheduler's HTTP extender can present exactly one
credential: a TLS client certificate. Its `Extender.tlsConfig` (kubescheduler.config.k8s.io/v1
`ExtenderTLSConfig`: insecure, serverName, certFile / keyFile / caFile, certData / keyData /
caData) becomes the client's TLS configuration, and its requests carry only a Content-Type
header, never an Authorization one (kubernetes/kubernetes pkg/scheduler/extender.go:
`makeTransport`, `send`). Note that with `enableHTTPS: true` and no CA it does not verify the
server at all, so the deploy/ configuration always gives one.

So a caller is admitted by either of:
- a client certificate signed by the configured client CA (mutual TLS, `runextender` only; TLS
  ends in that process), whose subject common name or a DNS / URI subject alternative name is
  one of the allowed names (any name when none is configured);
- `Authorization: Bearer <token>` with one of the tokens of the token file (one per line: a
  mounted Secret), for callers that cannot present a certificate, such as a proxy in front of
  the web process's routes. Tokens are compared as SHA-256 digests, in constant time.

Settings (environment; `runextender` options override them): GPUSCHED_EXTENDER_TLS_CERT and
GPUSCHED_EXTENDER_TLS_KEY (the server's certificate), GPUSCHED_EXTENDER_CLIENT_CA,
GPUSCHED_EXTENDER_CLIENT_NAMES (comma-separated), GPUSCHED_EXTENDER_TOKEN_FILE.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

BEARER = "bearer "


class ExtenderAuthError(ValueError):
    """A credential file that cannot be used (named in the message)."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class ExtenderAuth:
    token_digests: tuple[bytes, ...] = ()
    client_ca: str = ""  # a PEM file: client certificates it signed are accepted
    client_names: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls, *, token_file: str = "", client_ca: str = "", client_names: Iterable[str] = ()
    ) -> ExtenderAuth:
        digests: tuple[bytes, ...] = ()
        if token_file:
            try:
                lines = Path(token_file).read_text().splitlines()
            except OSError as exc:
                raise ExtenderAuthError(f"extender token file {token_file}: {exc}") from exc
            digests = tuple(_digest(line.strip()) for line in lines if line.strip())
            if not digests:
                raise ExtenderAuthError(f"extender token file {token_file} holds no token")
        names = frozenset(n.strip() for n in client_names if n.strip())
        return cls(digests, client_ca, names)

    @classmethod
    def from_settings(cls) -> ExtenderAuth:
        return cls.build(
            token_file=settings.EXTENDER_TOKEN_FILE,
            client_ca=settings.EXTENDER_CLIENT_CA,
            client_names=settings.EXTENDER_CLIENT_NAMES,
        )

    @property
    def configured(self) -> bool:
        """Whether any caller can be admitted at all."""
        return bool(self.token_digests or self.client_ca)

    def admits(self, authorization: str, certificate: Mapping[str, Any] | None) -> str:
        """Why the caller (its Authorization header, its verified TLS certificate) is refused,
        for a 401 and the log; empty when it is admitted."""
        if certificate and self.client_ca:
            names = certificate_names(certificate)
            if not self.client_names or names & self.client_names:
                return ""
            return f"client certificate {sorted(names)} is not among the allowed names"
        header = authorization
        if header[: len(BEARER)].lower() == BEARER and self.token_digests:
            given = _digest(header[len(BEARER) :].strip())
            # Every digest is compared, so the time taken says nothing about which one matched.
            matched = [hmac.compare_digest(given, known) for known in self.token_digests]
            return "" if any(matched) else "unknown bearer token"
        if not self.configured:
            return "no extender credentials are configured (docs/security.md)"
        return "authentication required: a client certificate or a bearer token"


def certificate_names(certificate: Mapping[str, Any]) -> set[str]:
    """The subject common names and DNS / URI subject alternative names of a peer certificate
    (as ssl.SSLSocket.getpeercert() gives it)."""
    names = {
        value for rdn in certificate.get("subject", ()) for key, value in rdn if key == "commonName"
    }
    names |= {
        value for kind, value in certificate.get("subjectAltName", ()) if kind in ("DNS", "URI")
    }
    return names


def server_context(*, cert: str, key: str, client_ca: str = "") -> ssl.SSLContext:
    """The extender's TLS: TLS 1.2 or later with the given certificate; with a client CA,
    certificates it signed are verified (optional, so that bearer-token callers can connect;
    `admits` decides per request)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        if client_ca:
            context.load_verify_locations(cafile=client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise ExtenderAuthError(f"extender TLS files ({cert}, {key}, {client_ca}): {exc}") from exc
    return context

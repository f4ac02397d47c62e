"""HTTPS to a BMC with its certificate pinned, and nothing secret in any message.

Invariants:

* every request opens a connection, completes the TLS handshake, and compares the SHA-256 of the
  peer certificate (DER) with the pinned fingerprint BEFORE the first byte of a request (and so
  before any credential) is written; a mismatch closes the connection and raises;
* certificate-authority verification is replaced by the pin, never skipped without it: BMCs use
  self-signed certificates, so the pin is the only trust anchor;
* a response body is read up to :data:`MAX_BODY` bytes (more is an error), every socket call has a
  timeout, and a :class:`BmcError`'s text names the BMC (address:port) and never a credential;
* a resource's ``ETag`` header is handed back (one printable line, at most :data:`MAX_ETAG`
  characters, else None) so that a PATCH can send it in ``If-Match``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

#: The largest response body read from a BMC (a ComputerSystem resource is a few KiB).
MAX_BODY = 1 << 20
#: The longest ETag sent back in ``If-Match`` (longer ones are not sent: the PATCH goes unconditional).
MAX_ETAG = 256
#: Paths gpuforge requests: under the Redfish service root, no query, no scheme, no host (and no
#: ``.``/``..`` segment: checked beside the pattern).
_PATH = re.compile(r"/redfish/v1(/[A-Za-z0-9._~%-]+)*/?")
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]+")


class BmcError(Exception):
    """A BMC that could not be reached, was not the pinned one, or refused a request."""


@dataclass(frozen=True)
class Credentials:
    """A BMC account; the password is in no repr, str or message."""

    username: str
    password: str = field(repr=False)

    def header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return f"Basic {token}"


@dataclass(frozen=True)
class Endpoint:
    """Where a BMC's Redfish service listens and the certificate it must present."""

    host: str
    port: int
    fingerprint: str  # 64 lower-case hexadecimal digits (the spec's tls_fingerprint)
    timeout_s: float = 15.0

    @property
    def label(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"BMC {host}:{self.port}"


def _context() -> ssl.SSLContext:
    """TLS 1.2 or later; the chain is not checked against a CA because the pin checks the certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def pinned_connection(ep: Endpoint) -> http.client.HTTPSConnection:
    """A connection whose handshake is done and whose peer certificate has the pinned SHA-256."""
    conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=ep.timeout_s, context=_context())
    try:
        conn.connect()
        sock = conn.sock
        der = sock.getpeercert(binary_form=True) if isinstance(sock, ssl.SSLSocket) else None
    except (OSError, ssl.SSLError) as e:
        conn.close()
        raise BmcError(f"{ep.label}: cannot connect over TLS: {_reason(e)}") from None
    seen = hashlib.sha256(der).hexdigest() if der else "none"
    if not hmac.compare_digest(seen, ep.fingerprint):
        conn.close()
        raise BmcError(
            f"{ep.label}: its TLS certificate's SHA-256 fingerprint is {seen}, the spec pins "
            f"{ep.fingerprint}: not the pinned BMC, nothing was sent (check bmc.tls_fingerprint)"
        )
    return conn


def _reason(e: BaseException) -> str:
    if isinstance(e, socket.timeout | TimeoutError):
        return "timed out"
    return _UNPRINTABLE.sub(" ", getattr(e, "strerror", None) or str(e) or type(e).__name__)[:200]


def _error_text(body: bytes) -> str:
    """The Redfish error message of a response body (``error.message`` or its first extended info)."""
    try:
        error = json.loads(body).get("error", {})
        info = error.get("@Message.ExtendedInfo") or [{}]
        text = str(info[0].get("Message") or error.get("message") or "")
    except (ValueError, AttributeError, IndexError, TypeError):
        text = ""
    return _UNPRINTABLE.sub(" ", text)[:200]


def _etag(value: str | None) -> str | None:
    """An ETag header worth sending back in ``If-Match`` (None: absent, or not one printable line)."""
    if value is None or not value.strip() or len(value) > MAX_ETAG or _UNPRINTABLE.search(value):
        return None
    return value.strip()


def exchange(
    ep: Endpoint,
    creds: Credentials,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    if_match: str | None = None,
) -> tuple[Any, str | None]:
    """``method path`` on the BMC (pinned, Basic auth, ``If-Match`` when given): the JSON answer
    (None for an empty one) and the resource's ETag header (None when it sends none)."""
    if not _PATH.fullmatch(path) or any(part in (".", "..") for part in path.split("/")):
        raise BmcError(f"{ep.label}: refusing to request {path[:120]!r}: not a path under /redfish/v1")
    payload = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": creds.header(), "Accept": "application/json", "OData-Version": "4.0"}
    if payload is not None:
        headers["Content-Type"] = "application/json"
    if if_match is not None:
        headers["If-Match"] = if_match
    conn = pinned_connection(ep)
    try:
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        data = resp.read(MAX_BODY + 1)
    except (OSError, http.client.HTTPException) as e:
        raise BmcError(f"{ep.label}: {method} {path}: {_reason(e)}") from None
    finally:
        conn.close()
    return _answer(ep, method, path, resp.status, data), _etag(resp.getheader("ETag"))


def _answer(ep: Endpoint, method: str, path: str, status: int, data: bytes) -> Any:
    """The JSON of a response, or the BmcError its status or size means."""
    if len(data) > MAX_BODY:
        raise BmcError(f"{ep.label}: {method} {path}: answer larger than {MAX_BODY} bytes")
    if status in (401, 403):
        raise BmcError(f"{ep.label}: the BMC refused the credentials (HTTP {status}); check bmc.credentials_file")
    if status >= 300:
        why = _error_text(data)
        raise BmcError(f"{ep.label}: {method} {path}: HTTP {status}{': ' + why if why else ''}")
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except ValueError:
        raise BmcError(f"{ep.label}: {method} {path}: the answer is not JSON") from None


def request(ep: Endpoint, creds: Credentials, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """``method path`` on the BMC (pinned, Basic auth); the JSON answer (None for an empty one)."""
    return exchange(ep, creds, method, path, body)[0]

"""Find the Debian mirror the host itself uses, from its apt sources.

The lab never names a mirror host of its own: the root filesystem is built from, and the site
mirror (apt-cacher-ng) forwards to, whatever ``/etc/apt/sources.list.d/*.sources`` or
``/etc/apt/sources.list`` on the host point at.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpuforge.render.aptsources import AptSource, parse_deb822, parse_one_line

SUITE = "bookworm"
COMPONENTS = "main contrib non-free non-free-firmware"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

__all__ = ["HostMirrors", "SourcesError", "host_mirrors", "parse_deb822", "parse_one_line", "pick_mirrors"]


class SourcesError(RuntimeError):
    """No usable Debian mirror in the host's apt sources."""


@dataclass(frozen=True)
class HostMirrors:
    """The host's Debian archive and Debian security archive URIs (no trailing slash)."""

    debian: str
    security: str


def pick_mirrors(entries: list[AptSource], suite: str = SUITE) -> HostMirrors:
    """Choose the Debian archive and security archive URIs among the host's entries."""
    debian = security = None
    for e in entries:
        if not e.uri.startswith(("http://", "https://")):
            continue
        if security is None and any(s.endswith("-security") or s.endswith("/updates") for s in e.suites):
            security = e.uri
        elif debian is None and any(s in (suite, f"{suite}-updates", "stable") for s in e.suites):
            debian = e.uri
    if debian is None:
        raise SourcesError(
            f"no Debian {suite} archive (http/https) found in the host's apt sources "
            "(/etc/apt/sources.list.d/*.sources or /etc/apt/sources.list)"
        )
    if security is None:  # same server, conventional path
        parts = urlsplit(debian)
        base = parts.path.rstrip("/")
        base = base[: -len("/debian")] if base.endswith("/debian") else base
        security = f"{parts.scheme}://{parts.netloc}{base}/debian-security"
    return HostMirrors(debian=debian, security=security)


def host_mirrors(root: str = "/") -> HostMirrors:
    """Read the host's apt sources under ``root`` and pick its Debian mirrors."""
    apt = os.path.join(root, "etc/apt")
    entries: list[AptSource] = []
    for path in sorted(glob.glob(os.path.join(apt, "sources.list.d/*.sources"))):
        entries += parse_deb822(_read(path))
    for path in [os.path.join(apt, "sources.list"), *sorted(glob.glob(os.path.join(apt, "sources.list.d/*.list")))]:
        entries += parse_one_line(_read(path))
    return pick_mirrors(entries)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def as_http(uri: str) -> str:
    """The URI the nodes use: plain http, so apt-cacher-ng can cache it (it fetches https itself)."""
    return "http://" + uri.split("://", 1)[1] if uri.startswith("https://") else uri


def host_path(uri: str) -> str:
    """``host/path`` of a URI, as apt-cacher-ng's Remap prefixes want it."""
    parts = urlsplit(uri)
    return f"{parts.netloc}{parts.path.rstrip('/')}"


def node_sources(m: HostMirrors, suite: str = SUITE) -> str:
    """deb822 ``/etc/apt/sources.list.d/debian.sources`` for the nodes (reached via the proxy)."""
    return (
        f"Types: deb\nURIs: {as_http(m.debian)}\nSuites: {suite} {suite}-updates\n"
        f"Components: {COMPONENTS}\nSigned-By: {KEYRING}\n\n"
        f"Types: deb\nURIs: {as_http(m.security)}\nSuites: {suite}-security\n"
        f"Components: {COMPONENTS}\nSigned-By: {KEYRING}\n"
    )

"""apt source lists parsed: deb822 (``.sources``) and one-line (``sources.list``) formats.

Shared by the lab (which mirrors whatever the host uses) and the NVIDIA deploy (which
enables Debian's non-free components on a node's own mirror).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AptSource:
    """One enabled ``deb`` source: URI (no trailing slash), suites and components."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...] = ()


def _stanzas(text: str) -> list[dict[str, str]]:
    """deb822 stanzas with lower-case keys; continuation lines folded in."""
    stanzas: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    key = ""
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if cur:
                stanzas.append(cur)
            cur, key = {}, ""
        elif raw[0] in " \t" and key:
            cur[key] += " " + raw.strip()
        elif ":" in raw:
            k, v = raw.split(":", 1)
            key = k.strip().lower()
            cur[key] = v.strip()
    return stanzas


def parse_deb822(text: str) -> list[AptSource]:
    """``deb`` entries of deb822 text (disabled stanzas skipped)."""
    out: list[AptSource] = []
    for stanza in _stanzas(text):
        if stanza.get("enabled", "yes").lower() == "no" or "deb" not in stanza.get("types", "").split():
            continue
        suites = tuple(stanza.get("suites", "").split())
        components = tuple(stanza.get("components", "").split())
        out += [AptSource(uri.rstrip("/"), suites, components) for uri in stanza.get("uris", "").split()]
    return out


def parse_one_line(text: str) -> list[AptSource]:
    """``deb`` entries of one-line ``sources.list`` text (``[options]`` skipped)."""
    out: list[AptSource] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        rest = words[1:]
        if rest and rest[0].startswith("["):  # options, possibly spread over several words
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2:
            out.append(AptSource(rest[0].rstrip("/"), (rest[1],), tuple(rest[2:])))
    return out


def parse_apt_sources(text: str) -> list[AptSource]:
    """``deb`` entries of either format (deb822 when the text has a ``Types:`` field)."""
    if re.search(r"^\s*Types:", text, re.MULTILINE | re.IGNORECASE):
        return parse_deb822(text)
    return parse_one_line(text)

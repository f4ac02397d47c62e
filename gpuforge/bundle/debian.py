"""Debian version comparison and Packages indexes (deb822 stanzas, relations)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from debian.deb822 import Deb822, PkgRelation
from debian.debian_support import Version
from debian.debian_support import version_compare as debian_version_compare

from gpuforge.bundle.layout import DEB_ARCH


def split_version(version: str) -> tuple[int, str, str]:
    """``[epoch:]upstream[-revision]`` -> (epoch, upstream, revision) (python-debian's parse)."""
    v = Version(version.strip())
    return int(v.epoch or 0), v.upstream_version or "", v.debian_revision or ""


def version_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version ``a`` sorts before, with or after ``b`` (dpkg's rules,
    python-debian's implementation; tests compare it with ``dpkg --compare-versions``)."""
    c = debian_version_compare(a.strip(), b.strip())
    return (c > 0) - (c < 0)


def version_satisfies(version: str, op: str | None, wanted: str | None) -> bool:
    """Does ``version`` satisfy the relation ``op wanted`` (``<<``, ``<=``, ``=``, ``>=``, ``>>``)?"""
    if op is None or wanted is None:
        return True
    c = version_compare(version, wanted)
    return {
        "<<": c < 0,
        "<=": c <= 0,
        "<": c <= 0,  # obsolete dpkg spelling of <=
        "=": c == 0,
        ">=": c >= 0,
        ">": c >= 0,  # obsolete dpkg spelling of >=
        ">>": c > 0,
    }[op]


@dataclass
class Stanza:
    """One deb822 paragraph, field order and original spelling kept (values may span lines)."""

    fields: dict[str, tuple[str, str]] = field(default_factory=dict)  # lower name -> (name, value)

    def get(self, name: str, default: str = "") -> str:
        got = self.fields.get(name.lower())
        return got[1] if got else default

    def set(self, name: str, value: str) -> None:
        key = name.lower()
        self.fields[key] = (self.fields[key][0] if key in self.fields else name, value)

    @property
    def package(self) -> str:
        return self.get("Package")

    @property
    def version(self) -> str:
        return self.get("Version")

    @property
    def arch(self) -> str:
        return self.get("Architecture")

    @property
    def filename(self) -> str:
        return self.get("Filename")

    def text(self) -> str:
        return "".join(
            f"{name}:{value}\n" if not value or value.startswith("\n") else f"{name}: {value}\n"
            for name, value in self.fields.values()
        )


def parse_packages(text: str) -> list[Stanza]:
    """Paragraphs of a ``Packages`` (deb822) file, parsed by python-debian; continuation lines
    stay in their field, field order and spelling are kept."""
    out: list[Stanza] = []
    for paragraph in Deb822.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False):
        stanza = Stanza()
        for name, value in paragraph.items():
            stanza.fields[name.lower()] = (name, value.strip(" \t") if "\n" not in value else value.lstrip(" \t"))
        if stanza.fields:
            out.append(stanza)
    return out


def render_packages(stanzas: Iterable[Stanza]) -> str:
    """A ``Packages`` file: stanzas separated by blank lines."""
    return "\n".join(s.text() for s in stanzas)


@dataclass(frozen=True)
class Relation:
    """One alternative of a dependency: ``name (op version)``."""

    name: str
    op: str | None = None
    version: str | None = None

    def __str__(self) -> str:
        return f"{self.name} ({self.op} {self.version})" if self.op else self.name


def parse_relations(text: str, arch: str = DEB_ARCH) -> list[list[Relation]]:
    """``Depends``-style text -> groups of alternatives (``a (>= 1) | b, c``), parsed by python-debian.

    Architecture qualifiers (``:any``) are dropped; an alternative restricted to architectures
    other than ``arch`` (dpkg's name: ``amd64``, ``arm64``; ``[i386]``) is left out.
    """
    groups: list[list[Relation]] = []
    if not text.strip():
        return groups
    for group in PkgRelation.parse_relations(" ".join(text.split())):
        alts: list[Relation] = []
        for alt in group:
            arches = alt.get("arch")
            if arches:
                negated = all(not r.enabled for r in arches)
                if (arch in {r.arch for r in arches}) == negated:
                    continue
            op, version = alt["version"] or (None, None)
            alts.append(Relation(alt["name"], op, version))
        if alts:
            groups.append(alts)
    return groups


class PackageIndex:
    """A repository's packages (``arch`` and all) by name, and who provides which virtual name."""

    def __init__(self, stanzas: Iterable[Stanza], arch: str = DEB_ARCH) -> None:
        self.arch = arch
        arches = (arch, "all")
        self.by_name: dict[str, list[Stanza]] = {}
        self.providers: dict[str, list[tuple[Stanza, str | None]]] = {}
        seen: set[tuple[str, str, str]] = set()
        for s in stanzas:
            key = (s.package, s.version, s.arch)
            if not s.package or not s.version or s.arch not in arches or key in seen:
                continue
            seen.add(key)
            self.by_name.setdefault(s.package, []).append(s)
            for group in parse_relations(s.get("Provides"), arch):
                for r in group:
                    self.providers.setdefault(r.name, []).append((s, r.version if r.op == "=" else None))
        for versions in self.by_name.values():
            versions.sort(key=_SortKey, reverse=True)

    def versions(self, name: str) -> list[Stanza]:
        """Versions of a real package, newest first."""
        return self.by_name.get(name, [])


class _SortKey:
    """Sort stanzas by Debian version."""

    def __init__(self, s: Stanza) -> None:
        self.v = s.version

    def __lt__(self, other: _SortKey) -> bool:
        return version_compare(self.v, other.v) < 0

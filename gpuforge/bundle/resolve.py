"""Resolve pinned wants against a repository's Packages index (dependency closure within it)."""

from __future__ import annotations

import fnmatch
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuforge.bundle.debian import PackageIndex, Relation, Stanza, parse_relations, version_satisfies
from gpuforge.bundle.layout import DEB_ARCH


@dataclass(frozen=True)
class Want:
    """A package a node installs from a repository, at versions matching ``versions`` (globs)."""

    package: str
    versions: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True)
class Pin:
    """An apt preference the nodes carry: packages matching ``packages`` prefer ``versions``."""

    packages: tuple[str, ...]
    versions: tuple[str, ...]

    def applies(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, g) for g in self.packages)

    def matches(self, version: str) -> bool:
        return any(fnmatch.fnmatchcase(version, g) for g in self.versions)


@dataclass
class Resolution:
    """The packages a repository bundle carries, what comes from elsewhere, what failed."""

    selected: dict[str, Stanza] = field(default_factory=dict)
    required_by: dict[str, str] = field(default_factory=dict)
    external: dict[str, set[str]] = field(default_factory=dict)  # dependency text -> packages needing it
    problems: list[str] = field(default_factory=list)
    deps: dict[str, list[list[Relation]]] = field(default_factory=dict, repr=False)  # package -> its relations
    hard: dict[str, list[Relation]] = field(default_factory=dict, repr=False)  # name -> requirements without "|"
    provided: dict[str, list[str | None]] = field(default_factory=dict, repr=False)  # virtual -> provided versions
    arch: str = DEB_ARCH  # dpkg's architecture of the nodes: relations restricted to others are left out

    def add(self, s: Stanza, why: str) -> None:
        """Choose ``s`` and index what it requires and provides."""
        self.selected[s.package] = s
        self.required_by[s.package] = why
        pre, deps = parse_relations(s.get("Pre-Depends"), self.arch), parse_relations(s.get("Depends"), self.arch)
        self.deps[s.package] = pre + deps
        for g in self.deps[s.package]:
            if len(g) == 1:
                self.hard.setdefault(g[0].name, []).append(g[0])
        for g in parse_relations(s.get("Provides"), self.arch):
            for p in g:
                self.provided.setdefault(p.name, []).append(p.version if p.op == "=" else None)

    def satisfies(self, r: Relation) -> bool:
        """Does a chosen package (or what one provides) satisfy ``r``?"""
        s = self.selected.get(r.name)
        if s is not None and version_satisfies(s.version, r.op, r.version):
            return True
        return any(
            r.op is None or (v is not None and version_satisfies(v, r.op, r.version))
            for v in self.provided.get(r.name, [])
        )


def _ordered(index: PackageIndex, name: str, pins: list[Pin]) -> list[Stanza]:
    """Versions in apt's order of preference: pinned versions first, then newest first."""
    versions = index.versions(name)
    active = [p for p in pins if p.applies(name)]
    pinned = [s for s in versions if any(p.matches(s.version) for p in active)]
    ids = {id(s) for s in pinned}
    return pinned + [s for s in versions if id(s) not in ids]


def resolve(index: PackageIndex, wants: Iterable[Want], pins: Iterable[Pin] = ()) -> Resolution:
    """The wanted packages and their Depends/Pre-Depends closure within ``index``.

    One version per package: wanted versions match the want's globs; dependencies take the
    first version in apt's preference order (``pins``, then newest) that satisfies them and,
    where one does, every other requirement the chosen packages put on that package.
    An alternative group is satisfied by an already chosen package, else by its first
    alternative the repository has (a superset where apt would take an earlier one from the
    OS archive); a group none of whose names the repository carries is ``external``; one
    whose names it carries only at unsuitable versions is a problem.
    """
    pins = list(pins)
    res = Resolution(arch=index.arch)
    queue: deque[Stanza] = deque()

    def choose(s: Stanza, why: str) -> None:
        res.add(s, why)
        queue.append(s)

    for w in wants:
        if w.package in res.selected:
            continue
        options = _ordered(index, w.package, pins)
        if w.versions:
            options = [s for s in options if any(fnmatch.fnmatchcase(s.version, g) for g in w.versions)]
        if options:
            choose(options[0], w.why or "requested")
        else:
            have = ", ".join(s.version for s in index.versions(w.package)) or "none"
            want = " or ".join(w.versions) or "any version"
            res.problems.append(f"{w.package} {want} is not in the repository (versions there: {have})")
    while queue:
        s = queue.popleft()
        for group in res.deps[s.package]:
            _resolve_group(index, pins, res, s, group, choose)
    return res


def _resolve_group(
    index: PackageIndex,
    pins: list[Pin],
    res: Resolution,
    parent: Stanza,
    group: list[Relation],
    choose: Callable[[Stanza, str], None],
) -> None:
    text = " | ".join(str(r) for r in group)
    if any(res.satisfies(r) for r in group):
        return
    for r in group:
        real = [s for s in _ordered(index, r.name, pins) if version_satisfies(s.version, r.op, r.version)]
        # Versions that also meet every other hard requirement on the package come first.
        hard = res.hard.get(r.name, [])
        real.sort(key=lambda s: not all(version_satisfies(s.version, c.op, c.version) for c in hard))
        ok = {
            id(s)
            for s, pv in index.providers.get(r.name, [])
            if r.op is None or (pv is not None and version_satisfies(pv, r.op, r.version))
        }
        names = sorted({s.package for s, _ in index.providers.get(r.name, []) if id(s) in ok})
        provided = [s for name in names for s in _ordered(index, name, pins) if id(s) in ok]
        for s in real + provided:
            if s.package in res.selected:
                continue  # another version is chosen already: one version per package
            choose(s, parent.package)
            return
    known = [r for r in group if index.versions(r.name) or r.name in index.providers]
    if not known:
        res.external.setdefault(text, set()).add(parent.package)
        return
    chosen = [f"{r.name} {res.selected[r.name].version}" for r in known if r.name in res.selected]
    have = "; ".join(f"{r.name}: {', '.join(s.version for s in index.versions(r.name)) or 'virtual'}" for r in known)
    why = f"{', '.join(chosen)} is chosen already" if chosen else f"the repository has {have}"
    res.problems.append(f"{parent.package} {parent.version} depends on {text}: {why}")

"""Resolve pinned wants against an rpm-md repository (requires closure within it), as dnf sees it.

Modular filtering (dnf's): a package some module stream lists among its artifacts is visible
only when that stream is enabled on the nodes; every other package is visible. One version per
package name; the newest visible one that satisfies a requirement is taken, as dnf does, except
that a version the nodes hold (``pins``: the driver's ``dnf versionlock``) comes first.
"""

from __future__ import annotations

import fnmatch
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from gpuforge.bundle.resolve import Pin, Want
from gpuforge.bundle.rpmmd import Dep, RpmPackage, evr_cmp

#: dnf's architecture where a caller names none (nodes name theirs: ``gpuforge.spec.platforms``).
RPM_ARCH = "x86_64"


@dataclass
class RpmIndex:
    """The repository's visible packages, newest first per name, with what provides what."""

    by_name: dict[str, list[RpmPackage]] = field(default_factory=dict)
    providers: dict[str, list[tuple[RpmPackage, Dep]]] = field(default_factory=dict)
    files: dict[str, list[RpmPackage]] = field(default_factory=dict)

    @classmethod
    def build(cls, packages: Iterable[RpmPackage], hidden: Collection[str] = (), arch: str = RPM_ARCH) -> RpmIndex:
        """The node architecture's packages and noarch ones (i686 multilib and other arches left out)."""
        idx = cls()
        hidden = set(hidden)
        for p in packages:
            if p.arch not in (arch, "noarch") or p.nevra in hidden:
                continue
            idx.by_name.setdefault(p.name, []).append(p)
            for d in p.provides:
                idx.providers.setdefault(d.name, []).append((p, d))
            for f in p.files:
                idx.files.setdefault(f, []).append(p)
        for versions in idx.by_name.values():
            versions.sort(key=_Newest, reverse=True)
        return idx

    def knows(self, name: str) -> bool:
        return name in self.by_name or name in self.providers or name in self.files


class _Newest:
    """Sort key: rpm's EVR order."""

    def __init__(self, p: RpmPackage) -> None:
        self.p = p

    def __lt__(self, other: _Newest) -> bool:
        return evr_cmp(self.p.evr, other.p.evr) < 0


def hidden_by_modules(artifacts: dict[tuple[str, str], set[str]], enabled: Iterable[tuple[str, str]]) -> set[str]:
    """NEVRAs dnf hides: artifacts of module streams that are not enabled (and not of one that is)."""
    on = set(enabled)
    shown = set().union(*(a for k, a in artifacts.items() if k in on)) if on else set()
    every = set().union(*artifacts.values()) if artifacts else set()
    return every - shown


@dataclass
class RpmResolution:
    selected: dict[str, RpmPackage] = field(default_factory=dict)
    required_by: dict[str, str] = field(default_factory=dict)
    external: dict[str, set[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def satisfies(self, idx: RpmIndex, dep: Dep) -> bool:
        if dep.name.startswith("/"):
            return any(p.name in self.selected and self.selected[p.name] is p for p in idx.files.get(dep.name, []))
        for p, d in idx.providers.get(dep.name, []):
            if self.selected.get(p.name) is p and dep.matched_by(d.evr if d.flags == "EQ" else None):
                return True
        return False


def _matches(p: RpmPackage, globs: tuple[str, ...]) -> bool:
    plain = f"{p.evr.ver}-{p.evr.rel}"
    return not globs or any(fnmatch.fnmatchcase(v, g) for g in globs for v in (plain, p.version))


def _pinned(p: RpmPackage, pins: list[Pin]) -> bool:
    """Does a pin that applies to ``p`` hold its version (``version-release``, or with the epoch)?"""
    plain = f"{p.evr.ver}-{p.evr.rel}"
    return any(pin.applies(p.name) and (pin.matches(plain) or pin.matches(p.version)) for pin in pins)


def resolve_rpm(idx: RpmIndex, wants: Iterable[Want], pins: Iterable[Pin] = ()) -> RpmResolution:
    """The wanted packages (newest matching their version globs) and their requires closure.

    ``rpmlib(...)`` and rich ``(...)`` requirements are rpm's and dnf's own business on the
    node; a requirement nothing in the repository provides is ``external`` (the OS or EPEL);
    one provided only at other versions is a problem. A requirement met by several versions
    takes the one ``pins`` hold (the nodes lock the driver's packages at the pin, so a later point
    release that a ``>=`` requirement allows would not install there).
    """
    pins = list(pins)
    res = RpmResolution()
    queue: deque[RpmPackage] = deque()
    for w in wants:
        if w.package in res.selected:
            continue
        options = [p for p in idx.by_name.get(w.package, []) if _matches(p, w.versions)]
        if not options:
            have = ", ".join(p.version for p in idx.by_name.get(w.package, [])) or "none"
            want = " or ".join(w.versions) or "any version"
            res.problems.append(f"{w.package} {want} is not in the repository (versions there: {have})")
            continue
        res.selected[w.package] = options[0]
        res.required_by[w.package] = w.why or "requested"
        queue.append(options[0])
    while queue:
        parent = queue.popleft()
        for dep in parent.requires:
            if dep.name.startswith(("rpmlib(", "(")) or res.satisfies(idx, dep):
                continue
            chosen = _provider(idx, res, dep, pins)
            if chosen is not None:
                res.selected[chosen.name] = chosen
                res.required_by[chosen.name] = parent.name
                queue.append(chosen)
            elif not idx.knows(dep.name):
                res.external.setdefault(str(dep), set()).add(parent.name)
            else:
                have = ", ".join(p.version for p, _ in idx.providers.get(dep.name, [])) or "files only"
                res.problems.append(f"{parent.name} {parent.version} requires {dep}: the repository has {have}")
    return res


def _provider(idx: RpmIndex, res: RpmResolution, dep: Dep, pins: list[Pin]) -> RpmPackage | None:
    """The visible package that satisfies ``dep`` and is not another version of a chosen one:
    one of that name first, then one the pins hold, then the newest."""
    if dep.name.startswith("/"):
        candidates = list(idx.files.get(dep.name, []))
    else:
        candidates = [
            p for p, d in idx.providers.get(dep.name, []) if dep.matched_by(d.evr if d.flags == "EQ" else None)
        ]
    candidates.sort(key=lambda p: (p.name == dep.name, _pinned(p, pins), _Newest(p)), reverse=True)
    for p in candidates:
        if p.name not in res.selected:
            return p
    return None

"""The offline bundle: everything a spec's NVIDIA stack needs, gathered for an air-gapped site.

``gpuforge bundle SPEC -o DIR`` fetches, from where the spec can reach them (the spec's
mirror URLs in mirror mode, NVIDIA's public upstream otherwise), what the NVIDIA deploy
installs on the spec's nodes, in the layout ``gpuforge.render.nvidia_sources`` reads in offline mode:

* ``artifacts/<file name>``: release files (enroot packages, the pyxis tarball, dcgm-exporter);
* ``apt/<repo>/`` for ``nvidia-cuda`` and ``nvidia-container``: a flat repository holding
  exactly the packages the nodes need at their pinned versions plus their dependency closure
  within that repository, and a regenerated ``Packages`` index (``Filename: ./<deb>``, Size,
  SHA256). Dependencies the repository does not carry come from the node's OS archive and
  are listed as ``external`` in the manifest. Recommends are not followed: the deploys
  install with ``--no-install-recommends``;
* ``manifest.json``: every file with its sha256, size and source, what could not be
  fetched (``missing``) and what the bundle cannot carry (``unsupported``: the rpm
  repositories of RHEL nodes, which need ``repodata/`` generated with createrepo; one
  built by hand under ``rpm/<repo>/`` is recorded, as is a release file placed by hand
  where nothing publishes it, e.g. dcgm-exporter outside a mirror).

Downloads land in ``DIR/.partial/`` and are renamed into place only once their checksum
matches the repository index (release files: ``KNOWN_SHA256`` when it lists them, else
the checksum is recorded). A re-run keeps every file whose checksum still matches; an
index that cannot be reached leaves that repository as the previous run made it.
``verify_bundle`` re-checks a bundle against its manifest.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import http.client
import json
import lzma
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuforge.deploy import needs as nvneeds
from gpuforge.deploy.layers import deploys_for
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia import host_dcgm_exporter
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.model import DriverSource, SourceMode
from gpuforge.spec.nodes import Node

MANIFEST = "manifest.json"
FORMAT = "gpuforge-bundle/1"
PARTIAL = ".partial"
ARCHES = ("amd64", "all")
# Where a repository URL names the architecture (libnvidia-container's ``stable/deb/$(ARCH)``).
ARCH_IN_URL = "amd64"
CHUNK = 1 << 20
_SAFE_DEB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._~%-]*\.deb$")
# Checksum fields of a Packages stanza, strongest first, with their hashlib names.
INDEX_SUMS = (("SHA512", "sha512"), ("SHA256", "sha256"), ("SHA1", "sha1"), ("MD5sum", "md5"))

Log = Callable[[str], None]


# --------------------------------------------------------------------------- Debian versions


def _digit(c: str) -> bool:
    return "0" <= c <= "9"


def _order(c: str) -> int:
    """dpkg's character weight: ``~`` sorts before everything, letters before other symbols."""
    if c.isascii() and c.isalpha():
        return ord(c)
    if c == "~":
        return -1
    return ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    """dpkg's ``verrevcmp``: compare upstream versions or revisions."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not _digit(a[i])) or (j < len(b) and not _digit(b[j])):
            ac = _order(a[i]) if i < len(a) and not _digit(a[i]) else 0
            bc = _order(b[j]) if j < len(b) and not _digit(b[j]) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and _digit(a[i]) and j < len(b) and _digit(b[j]):
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and _digit(a[i]):
            return 1
        if j < len(b) and _digit(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def split_version(version: str) -> tuple[int, str, str]:
    """``[epoch:]upstream[-revision]`` -> (epoch, upstream, revision)."""
    v = version.strip()
    epoch = 0
    if ":" in v:
        e, v = v.split(":", 1)
        epoch = int(e) if e.isdigit() else 0
    upstream, _, revision = v.rpartition("-") if "-" in v else (v, "", "")
    return epoch, upstream, revision


def version_compare(a: str, b: str) -> int:
    """<0, 0 or >0 as Debian version ``a`` sorts before, with or after ``b`` (dpkg's rules)."""
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return -1 if ea < eb else 1
    c = _verrevcmp(ua, ub) or _verrevcmp(ra, rb)
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


# --------------------------------------------------------------------------- Packages indexes


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
    """Paragraphs of a ``Packages`` (deb822) file; continuation lines stay in their field."""
    out: list[Stanza] = []
    cur = Stanza()
    key = ""
    for raw in [*text.splitlines(), ""]:
        if not raw.strip():
            if cur.fields:
                out.append(cur)
            cur, key = Stanza(), ""
            continue
        if raw.startswith("#"):
            continue
        if raw[0] in " \t":
            if key:
                name, value = cur.fields[key]
                cur.fields[key] = (name, f"{value}\n{raw}")
            continue
        name, sep, value = raw.partition(":")
        if not sep:
            continue
        key = name.strip().lower()
        cur.fields[key] = (name.strip(), value.strip())
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


_REL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9+.\-]*)(?::[a-z0-9\-]+)?\s*(?:\(\s*(<<|<=|>=|>>|=|<|>)\s*([^)\s]+)\s*\))?")


def parse_relations(text: str) -> list[list[Relation]]:
    """``Depends``-style text -> groups of alternatives (``a (>= 1) | b, c``).

    Architecture qualifiers (``:any``) are dropped; an alternative restricted to other
    architectures (``[i386]``) is left out.
    """
    groups: list[list[Relation]] = []
    for part in " ".join(text.split()).split(","):
        alts: list[Relation] = []
        for alt in part.split("|"):
            alt = alt.strip()
            m = _REL.match(alt)
            if not m:
                continue
            arches = re.search(r"\[([^\]]*)\]", alt)
            if arches:
                names = arches.group(1).split()
                neg = all(a.startswith("!") for a in names)
                listed = {a.lstrip("!") for a in names}
                if (ARCH_IN_URL in listed) == neg:
                    continue
            alts.append(Relation(m.group(1), m.group(2), m.group(3)))
        if alts:
            groups.append(alts)
    return groups


class PackageIndex:
    """A repository's packages (amd64 and all) by name, and who provides which virtual name."""

    def __init__(self, stanzas: Iterable[Stanza], arches: tuple[str, ...] = ARCHES) -> None:
        self.by_name: dict[str, list[Stanza]] = {}
        self.providers: dict[str, list[tuple[Stanza, str | None]]] = {}
        seen: set[tuple[str, str, str]] = set()
        for s in stanzas:
            key = (s.package, s.version, s.arch)
            if not s.package or not s.version or s.arch not in arches or key in seen:
                continue
            seen.add(key)
            self.by_name.setdefault(s.package, []).append(s)
            for group in parse_relations(s.get("Provides")):
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


# --------------------------------------------------------------------------- resolution


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

    def add(self, s: Stanza, why: str) -> None:
        """Choose ``s`` and index what it requires and provides."""
        self.selected[s.package] = s
        self.required_by[s.package] = why
        self.deps[s.package] = parse_relations(s.get("Pre-Depends")) + parse_relations(s.get("Depends"))
        for g in self.deps[s.package]:
            if len(g) == 1:
                self.hard.setdefault(g[0].name, []).append(g[0])
        for g in parse_relations(s.get("Provides")):
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
    res = Resolution()
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


# --------------------------------------------------------------------------- what the spec needs


@dataclass
class RepoNeed:
    """Packages the nodes install from one repository URL."""

    kind: str
    fmt: str  # apt | rpm
    url: str | None
    reason: str | None
    distro: str
    wants: dict[str, Want] = field(default_factory=dict)
    pins: list[Pin] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"{self.fmt}/{self.kind}"


@dataclass
class ArtifactNeed:
    """A release file and the nodes that install it."""

    artifact: src.Artifact
    nodes: list[str] = field(default_factory=list)


@dataclass
class Needs:
    repos: dict[tuple[str, str, str | None], RepoNeed] = field(default_factory=dict)
    artifacts: dict[str, ArtifactNeed] = field(default_factory=dict)


def fetch_spec(spec: Spec) -> Spec:
    """The spec as the bundle fetches it: mirror mode as written, anything else from upstream."""
    if spec.sources.mode is SourceMode.MIRROR:
        return spec
    return spec.model_copy(update={"sources": spec.sources.model_copy(update={"mode": SourceMode.UPSTREAM})})


def _node_wants(ctx: nvneeds.Ctx) -> tuple[list[Want], list[Want], list[Pin]]:
    """(CUDA repository wants, container repository wants, apt pins) of one node."""
    s, n = ctx.spec, ctx.node
    cuda: list[Want] = []
    container: list[Want] = []
    pins: list[Pin] = []
    ver = ctx.driver_version
    if ctx.gpu_node and nvneeds.host_driver(s):
        pins.append(Pin(tuple(src.DRIVER_PIN_PACKAGES.split()), (f"{ver}-*",)))
    if nvneeds.dcgm_wanted(ctx):
        pins.append(Pin(("datacenter-gpu-manager-4-*",), (f"1:{s.versions.dcgm}-*", f"{s.versions.dcgm}-*")))
    if nvneeds.cuda_repo_wanted(ctx):
        if nvneeds.host_driver(s):
            if nvneeds.driver_source(s, n) is DriverSource.NVIDIA:
                if ctx.deb:
                    cuda += [Want(p, (f"{ver}-*",), f"driver {ver}") for p in nvneeds.driver_packages(ctx)]
                else:
                    cuda.append(
                        Want(
                            "nvidia-driver",
                            (f"{ver}-*",),
                            f"dnf module nvidia-driver:{nvneeds.rhel_driver_stream(ctx)}",
                        )
                    )
            if n.hardware.nvswitch:
                cuda.append(Want(nvneeds.fabric_manager_package(ctx), (f"{ver}-*",), "NVSwitch fabric manager"))
            tk = nvneeds.cuda_toolkit_package(ctx)
            if tk:
                cuda.append(Want(tk, (), f"CUDA toolkit {s.versions.cuda_toolkit}"))
        if nvneeds.dcgm_wanted(ctx):
            dv = s.versions.dcgm
            cuda += [Want(p, (f"1:{dv}-*", f"{dv}-*"), f"DCGM {dv}") for p in nvneeds.DCGM_PACKAGES]
        if n.mig_config:
            cuda.append(Want("nvidia-mig-manager", (), f"MIG layout {n.mig_config}"))
    if nvneeds.toolkit_wanted(ctx):
        tv = s.versions.container_toolkit
        container += [Want(p, (f"{tv}-1",), f"container toolkit {tv}") for p in nvneeds.TOOLKIT_PACKAGES]
    return cuda, container, pins


def _node_artifacts(ctx: nvneeds.Ctx) -> list[src.Artifact]:
    s, n = ctx.spec, ctx.node
    arts: list[src.Artifact] = []
    if nvneeds.enroot_wanted(s, n):
        arts += src.enroot_artifacts(s, n.os)
    if nvneeds.pyxis_wanted(s, n):
        arts.append(src.pyxis_artifact(s))
    if nvneeds.dcgm_wanted(ctx) and host_dcgm_exporter(s):
        arts.append(src.dcgm_exporter_artifact(s))
    return arts


def spec_needs(spec: Spec, nodes: list[Node] | None = None) -> Needs:
    """What the NVIDIA deploy installs on the spec's nodes, with the URLs to fetch it from."""
    s = fetch_spec(spec)
    needs = Needs()
    for n in nodes if nodes is not None else resolve_nodes(s):
        if "nvidia" not in deploys_for(n):
            continue
        ctx = nvneeds.Ctx(s, n, name=n.name)
        cuda_w, container_w, pins = _node_wants(ctx)
        fmt = "apt" if n.os.is_deb else "rpm"
        for want_list, repo in (
            (cuda_w, src.cuda_repo(s, n.os) if cuda_w else None),
            (container_w, src.container_repo(s, n.os) if container_w else None),
        ):
            if repo is None:
                continue
            url = repo.url.replace("$(ARCH)", ARCH_IN_URL) if repo.url else None
            key = (fmt, repo.kind, url)
            need = needs.repos.get(key)
            if need is None:
                need = RepoNeed(repo.kind, fmt, url, repo.reason, src.cuda_distro(n.os))
                needs.repos[key] = need
            for w in want_list:
                need.wants.setdefault(w.package, w)
            for p in pins:
                if p not in need.pins:
                    need.pins.append(p)
            need.nodes.append(n.name)
        for a in _node_artifacts(ctx):
            needs.artifacts.setdefault(a.name, ArtifactNeed(a)).nodes.append(n.name)
    return needs


# --------------------------------------------------------------------------- fetching


class FetchError(Exception):
    """A download that did not produce a verified file."""

    def __init__(self, url: str, reason: str, unreachable: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.unreachable = unreachable


_NET_ERRORS = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)


def _describe(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return f"unreachable: {e.reason}"
    return f"{type(e).__name__}: {e}"


class Fetcher:
    """HTTP(S)/file downloads with a timeout; a host found unreachable is not tried again."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.dead: dict[str, str] = {}  # host -> why

    def open(self, url: str) -> Any:
        host = urllib.parse.urlsplit(url).netloc
        if host in self.dead:
            raise FetchError(url, self.dead[host], unreachable=True)
        req = urllib.request.Request(url, headers={"User-Agent": "gpuforge-bundle"})
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raise FetchError(url, _describe(e)) from None
        except _NET_ERRORS as e:
            if host:
                self.dead[host] = _describe(e)
            raise FetchError(url, _describe(e), unreachable=True) from None

    def index(self, base: str) -> tuple[str, str]:
        """(URL, text) of a flat repository's ``Packages`` index (``.gz``, ``.xz`` or plain)."""
        last: FetchError | None = None
        for name, decode in (
            ("Packages.gz", gzip.decompress),
            ("Packages.xz", lzma.decompress),
            ("Packages", bytes),
        ):
            url = f"{base.rstrip('/')}/{name}"
            try:
                with self.open(url) as r:
                    data = r.read()
                return url, decode(data).decode("utf-8", "replace")
            except FetchError as e:
                if e.unreachable:
                    raise
                last = e
            except (*_NET_ERRORS, EOFError, lzma.LZMAError) as e:
                raise FetchError(url, f"unreadable index: {_describe(e)}") from None
        assert last is not None
        raise FetchError(f"{base.rstrip('/')}/Packages", f"no Packages index ({last.reason})")

    def download(self, url: str, dest: Path, partial: Path, expect: dict[str, str], size: int | None) -> str:
        """Fetch ``url`` to ``dest`` through a temp file in ``partial``; its sha256.

        ``expect`` maps hashlib names to published checksums: the file is renamed into place
        only when they and ``size`` match. Nothing is left behind on failure.
        """
        partial.mkdir(parents=True, exist_ok=True)
        tmp = partial / f"{dest.name}.{os.getpid()}.part"
        hs = {a: hashlib.new(a) for a in {"sha256", *expect}}
        got = 0
        try:
            with self.open(url) as r, tmp.open("wb") as f:
                while chunk := r.read(CHUNK):
                    f.write(chunk)
                    got += len(chunk)
                    for h in hs.values():
                        h.update(chunk)
            if size is not None and got != size:
                raise FetchError(url, f"{got} bytes, the index says {size}")
            for algo, want in expect.items():
                if hs[algo].hexdigest() != want.lower():
                    raise FetchError(url, f"{algo} {hs[algo].hexdigest()} does not match the published {want}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
        except _NET_ERRORS as e:
            raise FetchError(url, _describe(e)) from None
        finally:
            tmp.unlink(missing_ok=True)
        return hs["sha256"].hexdigest()


def _hash_file(path: Path, algos: Iterable[str]) -> dict[str, str]:
    hs = {a: hashlib.new(a) for a in algos}
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            for h in hs.values():
                h.update(chunk)
    return {a: h.hexdigest() for a, h in hs.items()}


def _index_sums(s: Stanza) -> dict[str, str]:
    """Published checksums of a stanza's file: SHA256 and the strongest other one."""
    sums = {algo: s.get(f).split()[0] for f, algo in INDEX_SUMS if s.get(f).strip()}
    keep = {k: v for k, v in sums.items() if k == "sha256"}
    for _, algo in INDEX_SUMS:
        if algo in sums:
            keep[algo] = sums[algo]
            break
    return keep


# --------------------------------------------------------------------------- building


@dataclass
class BundleResult:
    """What ``build_bundle`` did; ``manifest`` is what it wrote to ``manifest.json``."""

    manifest: dict[str, Any]
    downloaded: int = 0
    reused: int = 0
    removed: int = 0

    @property
    def complete(self) -> bool:
        return bool(self.manifest["complete"])


class _Builder:
    def __init__(self, out: Path, fetcher: Fetcher, log: Log) -> None:
        self.out = out
        self.partial = out / PARTIAL
        self.fetcher = fetcher
        self.log = log
        self.files: dict[str, dict[str, Any]] = {}
        self.missing: list[dict[str, Any]] = []
        self.downloaded = 0
        self.reused = 0
        self.previous = _previous_manifest(out)
        self.previous_files: dict[str, str] = {
            str(f.get("path")): str(f.get("sha256")) for f in self.previous.get("files", []) if isinstance(f, dict)
        }

    def add_file(self, rel: str, sha: str, source: str | None, checksum: str) -> None:
        size = (self.out / rel).stat().st_size
        self.files[rel] = {"path": rel, "sha256": sha, "size": size, "source": source, "checksum": checksum}

    def miss(self, what: str, url: str | None, error: str) -> None:
        self.missing.append({"what": what, "url": url, "error": error})

    def get(self, rel: str, url: str, expect: dict[str, str], size: int | None) -> str | None:
        """sha256 of ``rel`` in the bundle: kept when it matches what is known of it, else downloaded.

        Known: the published checksums (``expect``), else the sha256 an earlier run recorded.
        """
        dest = self.out / rel
        checks = dict(expect)
        if "sha256" not in checks and rel in self.previous_files:
            checks["sha256"] = self.previous_files[rel]
        if checks and dest.is_file() and (size is None or dest.stat().st_size == size):
            have = _hash_file(dest, {"sha256", *checks})
            if all(have[a] == v.lower() for a, v in checks.items()):
                self.reused += 1
                return have["sha256"]
        self.log(f"download {url}")
        try:
            sha = self.fetcher.download(url, dest, self.partial, expect, size)
        except FetchError as e:
            self.miss(rel, url, e.reason)
            return None
        self.downloaded += 1
        return sha


def _previous_manifest(out: Path) -> dict[str, Any]:
    """An existing manifest (empty when there is none or it is unreadable)."""
    try:
        data = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _repo_bundle(b: _Builder, path: str, needs: list[RepoNeed]) -> dict[str, Any]:
    """Resolve, fetch and index one ``apt/<repo>/``; its manifest record."""
    record: dict[str, Any] = {"path": path, "sources": [], "packages": [], "external": []}
    chosen: dict[str, tuple[Stanza, str, str]] = {}  # package -> (stanza, source URL, required by)
    external: dict[str, set[str]] = {}
    index_failed = False
    for need in needs:
        source: dict[str, Any] = {"url": need.url, "distro": need.distro, "nodes": len(need.nodes)}
        record["sources"].append(source)
        if need.url is None:
            for w in need.wants.values():
                b.miss(f"{path}: {w.package}", None, need.reason or "no source")
            index_failed = True
            continue
        try:
            index_url, text = b.fetcher.index(need.url)
        except FetchError as e:
            b.miss(f"{path}: Packages index", e.url, e.reason)
            index_failed = True
            continue
        source["index"] = index_url
        res = resolve(PackageIndex(parse_packages(text)), need.wants.values(), need.pins)
        for problem in res.problems:
            b.miss(f"{path}: {problem.split(' ', 1)[0]}", index_url, problem)
        for name, s in res.selected.items():
            prev = chosen.get(name)
            if prev is not None and _identity(prev[0]) != _identity(s):
                b.miss(
                    f"{path}: {name}",
                    need.url,
                    f"{need.distro} nodes need {name} {s.version}, others {prev[0].version}: one {path}/ "
                    "cannot serve both (the offline layout has one repository per kind)",
                )
                continue
            chosen.setdefault(name, (s, need.url, res.required_by[name]))
        for dep, parents in res.external.items():
            external.setdefault(dep, set()).update(parents)
    if index_failed and not chosen:
        # Keep what an earlier run fetched: an unreachable mirror does not empty a good bundle.
        for rel, sha in sorted(b.previous_files.items()):
            if rel.startswith(f"{path}/") and (b.out / rel).is_file():
                if _hash_file(b.out / rel, ["sha256"])["sha256"] == sha:
                    b.add_file(rel, sha, None, "kept from the previous run (the index was not reachable)")
                else:
                    b.miss(rel, None, "changed since the previous run, and the index is not reachable to refetch it")
        for old in b.previous.get("repositories", []):
            if isinstance(old, dict) and old.get("path") == path:
                record["packages"] = old.get("packages", [])
                record["external"] = old.get("external", [])
        record["kept"] = True
        return record
    stanzas: list[Stanza] = []
    wanted_files: set[str] = set()
    for name in sorted(chosen):
        s, base, why = chosen[name]
        fname = s.filename.rsplit("/", 1)[-1]
        rel = f"{path}/{fname}"
        if not _SAFE_DEB.match(fname) or rel in wanted_files:
            b.miss(f"{path}: {name}", base, f"bad or duplicate Filename {s.filename!r} in the index")
            continue
        url = urllib.parse.urljoin(base.rstrip("/") + "/", s.filename)
        expect = _index_sums(s)
        size = int(s.get("Size")) if s.get("Size").isdigit() else None
        got = b.get(rel, url, expect, size)
        if got is None:
            continue
        sha = got
        wanted_files.add(rel)
        b.add_file(rel, sha, url, "index" if expect else "none published")
        out = Stanza(dict(s.fields))
        out.set("Filename", f"./{fname}")
        out.set("Size", str((b.out / rel).stat().st_size))
        out.set("SHA256", sha)
        stanzas.append(out)
        record["packages"].append(
            {"package": name, "version": s.version, "architecture": s.arch, "path": rel, "required_by": why}
        )
    record["external"] = [{"dependency": d, "required_by": sorted(p)} for d, p in sorted(external.items())]
    repo_dir = b.out / path
    repo_dir.mkdir(parents=True, exist_ok=True)
    index_rel = f"{path}/Packages"
    _write_atomic(b.out / index_rel, render_packages(stanzas).encode())
    b.add_file(index_rel, _hash_file(b.out / index_rel, ["sha256"])["sha256"], None, "generated")
    b.files[index_rel]["source"] = "generated from " + ", ".join(
        s["index"] for s in record["sources"] if s.get("index")
    )
    return record


def _identity(s: Stanza) -> tuple[str, str, str]:
    return s.version, s.arch, s.get("SHA256") or s.get("MD5sum")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _prune(out: Path, keep: set[str], kept_dirs: set[str]) -> int:
    """Remove files under ``apt/`` that the new manifest does not list.

    The deploys push a repository directory whole, so a stale ``.deb`` must not stay there.
    """
    removed = 0
    for top in ("apt",):
        base = out / top
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(out).as_posix()
            if p.is_file() and rel not in keep and not any(rel.startswith(f"{d}/") for d in kept_dirs):
                p.unlink()
                removed += 1
        for d in sorted(base.rglob("*"), reverse=True):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
    return removed


def build_bundle(
    spec: Spec, spec_file: Path, out: Path, *, timeout: float = 60.0, log: Log | None = None
) -> BundleResult:
    """Gather what ``spec`` needs into ``out`` and write ``out/manifest.json``."""
    say: Log = log or (lambda _m: None)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / PARTIAL, ignore_errors=True)
    b = _Builder(out, Fetcher(timeout), say)
    needs = spec_needs(spec)
    repos: list[dict[str, Any]] = []
    unsupported: list[dict[str, Any]] = []
    kept_dirs: set[str] = set()
    try:
        by_path: dict[str, list[RepoNeed]] = {}
        for need in needs.repos.values():
            if need.fmt == "rpm":
                unsupported.append(_rpm_repo(b, need))
                continue
            by_path.setdefault(need.path, []).append(need)
        for path, group in sorted(by_path.items()):
            say(f"resolve {path}")
            record = _repo_bundle(b, path, group)
            if record.pop("kept", False):
                kept_dirs.add(path)
            repos.append(record)
        for name in sorted(needs.artifacts):
            _artifact(b, needs.artifacts[name])
    finally:
        shutil.rmtree(out / PARTIAL, ignore_errors=True)
    removed = _prune(out, set(b.files), kept_dirs)
    manifest = {
        "format": FORMAT,
        "spec": {
            "name": spec.cluster.name,
            "file": spec_file.name,
            "sha256": _hash_file(spec_file, ["sha256"])["sha256"],
        },
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fetched_from": fetch_spec(spec).sources.mode.value,
        "complete": not b.missing and all(u["provided"] for u in unsupported),
        "files": [b.files[k] for k in sorted(b.files)],
        "repositories": repos,
        "missing": b.missing,
        "unsupported": unsupported,
    }
    _write_atomic(out / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())
    return BundleResult(manifest, b.downloaded, b.reused, removed)


def _rpm_repo(b: _Builder, need: RepoNeed) -> dict[str, Any]:
    """An rpm repository gpuforge cannot build; one placed in the bundle by hand is recorded."""
    record: dict[str, Any] = {
        "repository": need.path,
        "url": need.url,
        "packages": sorted(need.wants),
        "nodes": len(need.nodes),
        "reason": "RHEL nodes need an rpm repository with repodata/ generated by createrepo, which "
        f"gpuforge bundle does not build: mirror the repository (mode: mirror), or build {need.path}/ "
        "with createrepo and re-run to record it",
        "provided": False,
    }
    repo = b.out / need.path
    if (repo / "repodata" / "repomd.xml").is_file():
        for p in sorted(repo.rglob("*")):
            if p.is_file():
                rel = p.relative_to(b.out).as_posix()
                b.add_file(rel, _hash_file(p, ["sha256"])["sha256"], None, "placed in the bundle by hand")
        record["provided"] = True
    return record


def _artifact(b: _Builder, an: ArtifactNeed) -> None:
    a = an.artifact
    rel = f"artifacts/{a.name}"
    expect = {"sha256": a.sha256} if a.sha256 else {}
    if a.url is None:
        dest = b.out / rel
        if dest.is_file():  # placed by hand: nothing publishes it
            sha = _hash_file(dest, ["sha256"])["sha256"]
            if a.sha256 and sha != a.sha256:
                b.miss(rel, None, f"the file in the bundle has sha256 {sha}, gpuforge knows {a.sha256}")
            else:
                b.add_file(rel, sha, None, "placed in the bundle by hand")
            return
        b.miss(rel, None, f"{a.reason}; or place the file at {rel} in the bundle")
        return
    got = b.get(rel, a.url, expect, None)
    if got is not None:
        b.add_file(rel, got, a.url, "known" if a.sha256 else "none published (recorded)")


# --------------------------------------------------------------------------- verification


def verify_bundle(bundle_dir: str | Path) -> list[str]:
    """Problems of a bundle against its manifest (empty: every file is there and intact).

    Checks each listed file's size and sha256, and that ``apt/`` and ``rpm/`` (pushed to
    the nodes whole) hold no file the manifest does not list.
    """
    out = Path(bundle_dir)
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        entries = list(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"{out / MANIFEST}: cannot read the manifest ({err})"]
    problems: list[str] = []
    listed: set[str] = set()
    for e in entries:
        rel = str(e.get("path", ""))
        listed.add(rel)
        p = out / rel
        if not rel or rel.startswith("/") or ".." in Path(rel).parts:
            problems.append(f"manifest entry with a bad path: {rel!r}")
        elif not p.is_file():
            problems.append(f"{rel}: missing")
        elif p.stat().st_size != e.get("size"):
            problems.append(f"{rel}: {p.stat().st_size} bytes, the manifest says {e.get('size')}")
        elif _hash_file(p, ["sha256"])["sha256"] != e.get("sha256"):
            problems.append(f"{rel}: sha256 differs from the manifest (changed or corrupted)")
    for top in ("apt", "rpm"):
        for p in sorted((out / top).rglob("*")) if (out / top).is_dir() else []:
            rel = p.relative_to(out).as_posix()
            if p.is_file() and rel not in listed:
                problems.append(f"{rel}: not in the manifest (it would be pushed to the nodes unchecked)")
    if (out / PARTIAL).exists():
        problems.append(f"{PARTIAL}/: an interrupted run left partial downloads")
    if not manifest.get("complete", False):
        problems.append(
            f"the manifest records an incomplete bundle ({len(manifest.get('missing', []))} missing, "
            f"{len(manifest.get('unsupported', []))} unsupported)"
        )
    return problems

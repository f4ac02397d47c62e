"""One ``rpm/<repo>/`` of the bundle: resolved against upstream's rpm-md, fetched, re-indexed.

Upstream's ``repodata/repomd.xml`` names ``primary`` (and ``filelists``, ``other``,
``modules``); each is fetched and checked against the checksum repomd.xml gives. Trust:
where upstream signs its metadata (the toolkit's ``repomd.xml.asc``) that signature is
checked before anything is read; where it signs its packages instead (CUDA, Docker) every
``.rpm`` is checked with ``rpmkeys`` against the repository key and must be the package the
metadata names. The bundle's repository holds the chosen packages at the top and
``repodata/`` with ``primary``/``filelists``/``other`` reduced to them, the ``modules.yaml``
documents of the module streams the nodes enable, and repomd.xml, which
``gpuforge.bundle.trust.sign_repositories`` signs with the bundle key (``repomd.xml.asc``).
"""

from __future__ import annotations

import urllib.parse
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from gpuforge.bundle.build_ledger import Builder, keep_previous, write_atomic
from gpuforge.bundle.downloads import RepoNeed
from gpuforge.bundle.fetch import FetchError, hash_file
from gpuforge.bundle.rpm_resolve import RpmIndex, hidden_by_modules, resolve_rpm
from gpuforge.bundle.rpmmd import (
    CARRIED,
    REPOMD,
    SAFE_RPM,
    MdRecord,
    MetadataError,
    compress_md,
    filter_metadata,
    filter_modules,
    module_artifacts,
    open_md,
    parse_primary,
    parse_repomd,
    render_repomd,
)
from gpuforge.bundle.rpmsig import RpmKeyring
from gpuforge.bundle.signing import SignatureError
from gpuforge.bundle.trust import UntrustedIndex, repository_key, signed_repomd
from gpuforge.spec import nvidia_packages as table

#: rpm-md's checksum type names -> hashlib's.
_ALGOS = {"sha": "sha1", "sha1": "sha1", "sha256": "sha256", "sha384": "sha384", "sha512": "sha512", "md5": "md5"}


def _algo(kind: str) -> str:
    if kind not in _ALGOS:
        raise MetadataError(f"unknown checksum type {kind!r}")
    return _ALGOS[kind]


class _Upstream:
    """Upstream's metadata, checked: repomd.xml (signed or not) and each file it lists."""

    def __init__(self, b: Builder, need: RepoNeed) -> None:
        assert need.url is not None
        self.base = need.url.rstrip("/")
        self.kind = need.kind
        self.signed_metadata = need.kind in table.RPM_METADATA_SIGNED
        self.fingerprint: str | None = None
        if self.signed_metadata:
            verified = signed_repomd(b.fetcher, need, b.keys)
            self.repomd = verified.text.encode()
            self.fingerprint = verified.fingerprint
        else:  # the packages are signed: the key checks each of them (_fetch_packages)
            self.repomd = b.fetcher.small(f"{self.base}/{REPOMD}")
        self.key = repository_key(b.fetcher, need, b.keys)[2]
        self.records = parse_repomd(self.repomd)
        #: Each metadata file, downloaded into .partial/ and checked against repomd.xml: large ones
        #: are read as streams from there.
        self.files: dict[str, Path] = {}
        for kind in CARRIED:
            if kind in self.records:
                self.files[kind] = self._fetch(b, self.records[kind])

    def _fetch(self, b: Builder, rec: MdRecord) -> Path:
        url = f"{self.base}/{rec.href}"
        dest = b.partial / "repodata" / self.kind / rec.href.rsplit("/", 1)[1]
        try:
            b.fetcher.download(url, dest, b.partial, {_algo(rec.checksum_type): rec.checksum}, rec.size)
        except FetchError as e:
            if e.unreachable:
                raise
            raise UntrustedIndex(url, f"{e.reason} (repomd.xml lists it)") from None
        return dest

    def small(self, kind: str) -> bytes:
        """A small metadata file (modules.yaml), whole and decompressed."""
        with open_md(self.files[kind]) as f:
            return f.read()


def rpm_repo_bundle(b: Builder, path: str, needs: list[RepoNeed]) -> dict[str, Any]:
    """Resolve, fetch, check and index one ``rpm/<repo>/``; its manifest record (``kept`` when
    upstream could not be read and the previous run's files stay)."""
    record: dict[str, Any] = {"path": path, "format": "rpm", "sources": [], "packages": [], "external": []}
    need = needs[0]
    for other in needs[1:]:
        b.miss(f"{path}", other.url, f"one {path}/ cannot serve {need.url} and {other.url} at once")
    source: dict[str, Any] = {"url": need.url, "distro": need.distro, "nodes": len(need.nodes)}
    record["sources"].append(source)
    if need.url is None:
        for w in need.wants.values():
            b.miss(f"{path}: {w.package}", None, need.reason or "no source")
        return keep_previous(b, path, record)
    try:
        up = _Upstream(b, need)
        modules = up.small("modules") if "modules" in up.files else None
        artifacts = module_artifacts(modules) if modules is not None else {}
        packages = parse_primary(up.files["primary"])
    except (FetchError, UntrustedIndex, MetadataError) as e:
        url = getattr(e, "url", f"{need.url}/{REPOMD}")
        b.miss(f"{path}: repodata", url, getattr(e, "reason", str(e)))
        return keep_previous(b, path, record)
    source.update(index=f"{up.base}/{REPOMD}", signed_by=up.fingerprint, key=need.key_url)
    source["checked"] = "repomd.xml.asc" if up.signed_metadata else "each package's signature (rpmkeys)"
    for module, stream in sorted(need.module_streams - set(artifacts)):
        b.miss(f"{path}: module {module}:{stream}", source["index"], "the repository's modules.yaml has no such stream")
    idx = RpmIndex.build(packages, hidden_by_modules(artifacts, need.module_streams), need.platform.names.rpm)
    res = resolve_rpm(idx, need.wants.values(), need.pins)
    for problem in res.problems:
        b.miss(f"{path}: {problem.split(' ', 1)[0]}", source["index"], problem)
    hrefs = _fetch_packages(b, path, up, res.selected, res.required_by, record)
    record["external"] = [{"dependency": d, "required_by": sorted(p)} for d, p in sorted(res.external.items())]
    _write_repodata(b, path, up, hrefs, modules, need.module_streams)
    return record


def _fetch_packages(
    b: Builder, path: str, up: _Upstream, selected: dict[str, Any], required_by: dict[str, str], record: dict[str, Any]
) -> dict[str, str]:
    """Download the chosen packages (checksum from primary; signature where upstream signs
    packages); pkgid -> file name of those now in the bundle."""
    hrefs: dict[str, str] = {}
    with ExitStack() as stack:
        keyring: RpmKeyring | None = None
        if not up.signed_metadata:
            try:
                keyring = stack.enter_context(RpmKeyring(up.key))
            except SignatureError as e:
                b.miss(f"{path}: package signatures", None, str(e))
                return hrefs
        for name in sorted(selected):
            p = selected[name]
            fname = p.href.rsplit("/", 1)[-1]
            rel = f"{path}/{fname}"
            if not SAFE_RPM.match(fname) or fname in hrefs.values():
                b.miss(f"{path}: {name}", up.base, f"bad or duplicate location {p.href!r} in primary")
                continue
            url = urllib.parse.urljoin(up.base + "/", p.href)
            try:
                expect = {_algo(p.checksum_type): p.pkgid}
            except MetadataError as e:
                b.miss(f"{path}: {name}", url, str(e))
                continue
            sha = b.get(rel, url, expect, p.size)
            if sha is None:
                continue
            if keyring is not None:
                try:
                    keyring.check(b.out / rel, p.nevra)
                except SignatureError as e:
                    (b.out / rel).unlink(missing_ok=True)
                    b.miss(f"{path}: {name}", url, str(e))
                    continue
            hrefs[p.pkgid] = fname
            b.add_file(rel, sha, url, "index" + (" and package signature" if keyring else ""))
            record["packages"].append(
                {
                    "package": name,
                    "version": p.version,
                    "architecture": p.arch,
                    "path": rel,
                    "required_by": required_by[name],
                }
            )
    return hrefs


def _write_repodata(
    b: Builder,
    path: str,
    up: _Upstream,
    hrefs: dict[str, str],
    modules: bytes | None,
    streams: set[tuple[str, str]],
) -> None:
    written = []
    for kind in ("primary", "filelists", "other"):
        if kind in up.files:
            written.append(compress_md(kind, filter_metadata(kind, up.files[kind], hrefs)))
    kept = filter_modules(modules, streams) if modules is not None and streams else None
    if kept is not None:
        written.append(compress_md("modules", kept))
    repodata = b.out / path / "repodata"
    repodata.mkdir(parents=True, exist_ok=True)
    for md, _, _ in written:
        rel = f"{path}/repodata/{md.name}"
        if not (b.out / rel).is_file() or (b.out / rel).read_bytes() != md.data:
            write_atomic(b.out / rel, md.data)
        b.add_file(rel, hash_file(b.out / rel, ["sha256"])["sha256"], None, "generated")
    repomd_rel = f"{path}/{REPOMD}"
    data = render_repomd(written)
    if not (b.out / repomd_rel).is_file() or (b.out / repomd_rel).read_bytes() != data:
        write_atomic(b.out / repomd_rel, data)
    b.add_file(repomd_rel, hash_file(b.out / repomd_rel, ["sha256"])["sha256"], None, "generated")
    b.files[repomd_rel]["source"] = f"generated from {up.base}/{REPOMD}"


def is_built(out: Path, path: str) -> bool:
    """Has ``rpm/<repo>/`` an index to sign?"""
    return (out / path / REPOMD).is_file()

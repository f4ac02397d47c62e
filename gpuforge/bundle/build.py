"""Build a bundle directory from a spec's needs (keeps what still verifies; prunes the rest)."""

from __future__ import annotations

import json
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gpuforge.bundle.build_ledger import Builder, keep_previous, write_atomic
from gpuforge.bundle.debian import PackageIndex, Stanza, parse_packages, render_packages
from gpuforge.bundle.downloads import ArtifactNeed, RepoNeed, fetch_spec, spec_needs
from gpuforge.bundle.fetch import Fetcher, FetchError, hash_file, index_sums
from gpuforge.bundle.images import image_list, render_image_list
from gpuforge.bundle.layout import FORMAT, IMAGES, MANIFEST, MANIFEST_SIG, PARTIAL, SAFE_DEB, Log
from gpuforge.bundle.resolve import resolve
from gpuforge.bundle.rpm_repo import is_built, rpm_repo_bundle
from gpuforge.bundle.rpmmd import REPOMD_SIG
from gpuforge.bundle.rpmsig import rpm_tools_missing
from gpuforge.bundle.signing import (
    BUNDLE_KEY,
    BUNDLE_RPM_KEY,
    RELEASE,
    BundleSigner,
    SignatureError,
    gpg_tools_missing,
)
from gpuforge.bundle.trust import (
    UntrustedIndex,
    manifest_signed_by,
    sign_repositories,
    signed_by_pinned_key,
    signed_index,
)
from gpuforge.spec import Spec
from gpuforge.spec.nvidia_packages import RPM_METADATA_SIGNED


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


def _repo_bundle(b: Builder, path: str, needs: list[RepoNeed]) -> dict[str, Any]:
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
            index = signed_index(b.fetcher, need, b.keys)
        except (FetchError, UntrustedIndex) as e:
            b.miss(f"{path}: Packages index", e.url, e.reason)
            index_failed = True
            continue
        source.update(index=index.url, signed_by=index.fingerprint, key=index.key_url)
        res = resolve(PackageIndex(parse_packages(index.text), need.platform.names.deb), need.wants.values(), need.pins)
        for problem in res.problems:
            b.miss(f"{path}: {problem.split(' ', 1)[0]}", index.url, problem)
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
        return keep_previous(b, path, record)
    stanzas: list[Stanza] = []
    wanted_files: set[str] = set()
    for name in sorted(chosen):
        s, base, why = chosen[name]
        fname = s.filename.rsplit("/", 1)[-1]
        rel = f"{path}/{fname}"
        if not SAFE_DEB.match(fname) or rel in wanted_files:
            b.miss(f"{path}: {name}", base, f"bad or duplicate Filename {s.filename!r} in the index")
            continue
        url = urllib.parse.urljoin(base.rstrip("/") + "/", s.filename)
        expect = index_sums(s)
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
    write_atomic(b.out / index_rel, render_packages(stanzas).encode())
    b.add_file(index_rel, hash_file(b.out / index_rel, ["sha256"])["sha256"], None, "generated")
    b.files[index_rel]["source"] = "generated from " + ", ".join(
        s["index"] for s in record["sources"] if s.get("index")
    )
    return record


def _identity(s: Stanza) -> tuple[str, str, str]:
    return s.version, s.arch, s.get("SHA256") or s.get("MD5sum")


def _prune(out: Path, keep: set[str], kept_dirs: set[str], tops: list[str]) -> int:
    """Remove files under ``apt/`` and the rpm repositories built here that the new manifest does not list.

    The deploys push a repository directory whole, so a stale package must not stay there.
    """
    removed = 0
    for top in ("apt", *tops):
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


def tools_missing(spec: Spec) -> list[str]:
    """Programs this host lacks that building ``spec``'s bundle needs: gpg always (signatures),
    rpm's ``rpmkeys``/``rpm`` for rpm repositories that sign their packages rather than their metadata."""
    missing = gpg_tools_missing()
    rpm_checks = any(
        n.fmt == "rpm" and n.url is not None and n.kind not in RPM_METADATA_SIGNED
        for n in spec_needs(spec).repos.values()
    )
    return missing + (rpm_tools_missing() if rpm_checks else [])


def build_bundle(
    spec: Spec,
    spec_file: Path,
    out: Path,
    *,
    timeout: float = 60.0,
    log: Log | None = None,
    fingerprint: str | None = None,
) -> BundleResult:
    """Gather what ``spec`` needs into ``out``, write ``out/manifest.json`` and sign it.

    ``fingerprint`` (default: the spec's ``sources.bundle_fingerprint``) is the bundle key the
    operator pinned: a re-run keeps that key and its signatures while what they cover is
    unchanged; any other key in ``out`` is replaced by a new one (see ``_seal``).
    """
    say: Log = log or (lambda _m: None)
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / PARTIAL, ignore_errors=True)
    b = Builder(out, Fetcher(timeout), say)
    needs = spec_needs(spec)
    repos: list[dict[str, Any]] = []
    kept_dirs: set[str] = set()
    try:
        by_path: dict[str, list[RepoNeed]] = {}
        for need in needs.repos.values():
            by_path.setdefault(need.path, []).append(need)
        for path, group in sorted(by_path.items()):
            say(f"resolve {path}")
            record = rpm_repo_bundle(b, path, group) if group[0].fmt == "rpm" else _repo_bundle(b, path, group)
            if record.pop("kept", False):
                kept_dirs.add(path)
            repos.append(record)
        for name in sorted(needs.artifacts):
            _artifact(b, needs.artifacts[name])
        _images(b, spec)
    finally:
        shutil.rmtree(out / PARTIAL, ignore_errors=True)
    contents = _Contents(spec, spec_file, repos, kept_dirs)
    manifest, removed = _seal(b, contents, fingerprint or spec.sources.bundle_fingerprint)
    return BundleResult(manifest, b.downloaded, b.reused, removed)


@dataclass(frozen=True)
class _Contents:
    """What a build gathered, for the manifest: the spec it came from and the repositories."""

    spec: Spec
    spec_file: Path
    repos: list[dict[str, Any]]
    kept_dirs: set[str]

    def apt(self, out: Path) -> list[str]:
        return [r["path"] for r in self.repos if r.get("format") != "rpm" and (out / r["path"] / "Packages").is_file()]

    def rpm(self, out: Path) -> list[str]:
        return [r["path"] for r in self.repos if r.get("format") == "rpm" and is_built(out, r["path"])]


def _seal(b: Builder, c: _Contents, pinned: str | None) -> tuple[dict[str, Any], int]:
    """Sign the repositories and the manifest with one key, write the manifest; (manifest, files pruned).

    Invariants: every signature in the bundle is by the key in ``apt/gpuforge-bundle.gpg``; an
    existing key is kept only when it is ``pinned`` and its signatures still cover what is there
    (a re-run with no change rewrites nothing, not even the manifest); otherwise a new key made
    for this build signs everything, and its secret half is gone when the build ends.
    """
    apt, rpm = c.apt(b.out), c.rpm(b.out)
    removed = 0
    if pinned is not None and signed_by_pinned_key(b.out, apt, rpm, pinned):
        signing = _signing_record(b, apt, rpm, pinned)
        removed = _prune_unlisted(b, c)
        manifest = _manifest(b, c, signing)
        if _same_manifest(b.previous, manifest) and manifest_signed_by(b.out, pinned):
            return b.previous, removed

    def write(rel: str, data: bytes) -> None:
        (b.out / rel).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(b.out / rel, data)

    try:
        with BundleSigner(f"gpuforge bundle {c.spec.cluster.name}") as signer:
            sign_repositories(signer, b.out, apt, write, rpm)
            signing = _signing_record(b, apt, rpm, signer.fingerprint())
            removed += _prune_unlisted(b, c)
            manifest = _manifest(b, c, signing)
            data = _manifest_bytes(manifest)
            write_atomic(b.out / MANIFEST, data)
            write_atomic(b.out / MANIFEST_SIG, signer.detach_sign(data))
            return manifest, removed
    except SignatureError as e:
        b.miss("bundle signature", None, f"cannot sign the bundle: {e}")
    (b.out / MANIFEST_SIG).unlink(missing_ok=True)  # an old signature must not outlive what it covered
    removed += _prune_unlisted(b, c)
    manifest = _manifest(b, c, {})
    write_atomic(b.out / MANIFEST, _manifest_bytes(manifest))
    return manifest, removed


def _signing_record(b: Builder, repos: list[str], rpm_repos: list[str], fingerprint: str) -> dict[str, Any]:
    """List the key and the repositories' signatures as bundle files; the manifest's ``signing`` record."""
    signed = [f"{path}/{RELEASE}" for path in repos] + [f"{path}/{REPOMD_SIG}" for path in rpm_repos]
    for rel in (BUNDLE_KEY, *([BUNDLE_RPM_KEY] if rpm_repos else []), *signed):
        b.add_file(rel, hash_file(b.out / rel, ["sha256"])["sha256"], None, "generated (bundle signature)")
    record: dict[str, Any] = {
        "key": BUNDLE_KEY,
        "fingerprint": fingerprint,
        "manifest_signature": MANIFEST_SIG,
        "repositories": repos + rpm_repos,
    }
    if rpm_repos:
        record["rpm_key"] = BUNDLE_RPM_KEY
    return record


def _prune_unlisted(b: Builder, c: _Contents) -> int:
    return _prune(b.out, set(b.files), c.kept_dirs, [r["path"] for r in c.repos if r.get("format") == "rpm"])


def _manifest(b: Builder, c: _Contents, signing: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "spec": {
            "name": c.spec.cluster.name,
            "file": c.spec_file.name,
            "sha256": hash_file(c.spec_file, ["sha256"])["sha256"],
        },
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fetched_from": fetch_spec(c.spec).sources.mode.value,
        "complete": not b.missing,
        "files": [b.files[k] for k in sorted(b.files)],
        "signing": signing,
        "repositories": c.repos,
        "missing": b.missing,
    }


def _manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2) + "\n").encode()


def _same_manifest(previous: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """The same manifest but for when it was made (as JSON reads it back)."""
    now = json.loads(_manifest_bytes(manifest))
    return {k: v for k, v in previous.items() if k != "created"} == {k: v for k, v in now.items() if k != "created"}


def _images(b: Builder, spec: Spec) -> None:
    """``images.txt``: the container images the cluster pulls (Kubernetes specs only)."""
    if spec.kubernetes is None:
        return
    try:
        text = render_image_list(spec, image_list(spec, b.out))
    except (ValueError, OSError, tarfile.TarError, yaml.YAMLError) as e:
        b.miss(IMAGES, None, f"cannot list the container images: {e}")
        return
    write_atomic(b.out / IMAGES, text.encode())
    b.add_file(IMAGES, hash_file(b.out / IMAGES, ["sha256"])["sha256"], None, "generated (image list)")


def _artifact(b: Builder, an: ArtifactNeed) -> None:
    """One release file in ``artifacts/``: downloaded (or placed by hand, where nothing publishes it)
    and listed only when its sha256 is the one known before it was fetched.

    Invariant: the manifest lists no release file whose sha256 gpuforge did not know beforehand
    (``gpuforge.spec.artifact_digests`` or the spec's ``sources.artifact_sha256``): such a file is
    refused, listed as missing with how to pin its sha256, never recorded as it came.
    """
    a = an.artifact
    rel = f"artifacts/{a.name}"
    if a.sha256 is None:
        b.miss(rel, a.url, a.reason or f"no sha256 is known for {a.name}: refused")
        return
    known = f"sha256 known beforehand: {a.sha256_from or 'gpuforge'}"
    if a.url is None:
        dest = b.out / rel
        if dest.is_file():  # placed by hand: nothing publishes it
            sha = hash_file(dest, ["sha256"])["sha256"]
            if sha != a.sha256:
                b.miss(rel, None, f"the file in the bundle has sha256 {sha}, not the known {a.sha256}: refused")
            else:
                b.add_file(rel, sha, None, f"placed in the bundle by hand; {known}")
            return
        b.miss(rel, None, f"{a.reason}; or place the file at {rel} in the bundle")
        return
    got = b.get(rel, a.url, {"sha256": a.sha256}, None)
    if got is not None:
        b.add_file(rel, got, a.url, known)

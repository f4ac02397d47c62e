"""Re-check a bundle against the key the operator pinned (nothing unverified is pushed to a node).

Trust comes from outside the bundle: the operator pins the fingerprint of the key
``gpuforge bundle`` signed it with (``--fingerprint``, ``sources.bundle_fingerprint``). The
bundle's key file must hold exactly that key before it is used; ``manifest.json.asc`` must verify
``manifest.json`` with it; only then is the manifest read, and every file is checked against it:
so a bundle folder anyone can write cannot vouch for itself by rewriting its manifest or
re-signing it with a key of its own.

Every entry of the bundle tree is looked at without following links (``lstat``): only
directories and regular files may be there (a symlink to ``/dev/zero`` or to a control-host
file, a FIFO, a dangling link are refused), every file under ``apt/``, ``rpm/`` and
``artifacts/`` must be listed, and every listed file must have its size and sha256. The
repositories' signatures must be by the same pinned key. A malformed manifest is a problem to
report, never a crash.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from gpuforge.bundle.fetch import hash_file
from gpuforge.bundle.layout import FORMAT, MANIFEST, MANIFEST_SIG, PARTIAL
from gpuforge.bundle.rpmmd import REPOMD, REPOMD_SIG
from gpuforge.bundle.signing import (
    BUNDLE_KEY,
    BUNDLE_RPM_KEY,
    RELEASE,
    SignatureError,
    dearmor,
    inrelease_problem,
    verify_pinned,
)
from gpuforge.bundle.trust import repomd_problem

#: Folders pushed to nodes: nothing in them may be unlisted.
PUSHED = ("apt", "rpm", "artifacts")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def manifest_entry_problem(index: int, e: Any) -> str | None:
    """Why a manifest ``files`` entry is malformed (None: well-formed)."""
    if not isinstance(e, dict):
        return f"manifest entry {index}: not an object"
    rel = e.get("path")
    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in Path(rel).parts or "\\" in rel:
        return f"manifest entry {index}: bad path {rel!r}"
    size = e.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"manifest entry {index} ({rel}): bad size {size!r}"
    sha = e.get("sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        return f"manifest entry {index} ({rel}): bad sha256 {sha!r}"
    return None


def _tree_problems(out: Path) -> tuple[list[str], dict[str, int]]:
    """Non-regular entries anywhere in the bundle, and the regular files (path -> size)."""
    problems: list[str] = []
    files: dict[str, int] = {}
    for root, dirs, names in os.walk(out, followlinks=False):
        for name in sorted([*dirs, *names]):
            full = Path(root) / name
            rel = full.relative_to(out).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                problems.append(f"{rel}: a symbolic link (only regular files are pushed to nodes)")
            elif stat.S_ISREG(st.st_mode):
                files[rel] = st.st_size
            elif not stat.S_ISDIR(st.st_mode):
                problems.append(f"{rel}: not a regular file (FIFO, socket or device)")
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    return problems, files


def _signature_problems(out: Path, files: dict[str, int], keyring: bytes) -> list[str]:
    """Every apt repository's InRelease must verify with the pinned bundle key (``keyring``) and
    cover its Packages; every rpm repository's repomd.xml.asc must verify with it (repomd.xml lists
    each file's checksum), and dnf's armored copy of the key must be that same key."""
    repos = sorted(rel.rsplit("/", 1)[0] for rel in files if rel.startswith("apt/") and rel.endswith("/Packages"))
    rpm_repos = sorted(
        rel.removesuffix(f"/{REPOMD}") for rel in files if rel.startswith("rpm/") and rel.endswith(f"/{REPOMD}")
    )
    if rpm_repos and BUNDLE_RPM_KEY not in files:
        return [f"{BUNDLE_RPM_KEY}: missing (dnf checks the rpm repositories' signatures with it)"]
    problems = [(f"{path}/{RELEASE}", inrelease_problem(out, path, keyring)) for path in repos]
    problems += [(f"{path}/{REPOMD_SIG}", repomd_problem(out, path, keyring)) for path in rpm_repos]
    if rpm_repos and dearmor((out / BUNDLE_RPM_KEY).read_bytes()) != dearmor(keyring):
        problems.append((BUNDLE_RPM_KEY, f"not the key in {BUNDLE_KEY}"))
    return [f"{rel}: {why}" for rel, why in problems if why is not None]


def _read_regular(path: Path) -> bytes:
    """A regular file's bytes, never through a symbolic link (OSError otherwise); a FIFO does not block."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError("not a regular file")
        return f.read()


def anchored_manifest(out: Path, fingerprint: str) -> tuple[bytes, bytes] | str:
    """(manifest.json's bytes, the bundle key) once the manifest's signature verifies with the key
    pinned by ``fingerprint``; else why not. Nothing in the bundle is believed before this."""
    read: dict[str, bytes] = {}
    for rel in (BUNDLE_KEY, MANIFEST, MANIFEST_SIG):
        try:
            read[rel] = _read_regular(out / rel)
        except OSError as e:
            return (
                f"{out / rel}: cannot read it as a regular file ({e.strerror or e}); 'gpuforge bundle' writes it "
                "(a bundle made before gpuforge signed its manifest: run gpuforge bundle again)"
            )
    key, manifest, signature = read[BUNDLE_KEY], read[MANIFEST], read[MANIFEST_SIG]
    try:
        verify_pinned(manifest, signature, key, fingerprint)
    except SignatureError as e:
        return (
            f"{MANIFEST_SIG}: the manifest is not signed by the pinned bundle key {fingerprint} ({e}): "
            "the bundle was changed or re-signed since it was made, or the pin is not this bundle's"
        )
    return manifest, key


#: What ``verify_bundle`` says when no fingerprint is pinned.
NOT_ANCHORED = (
    "not anchored: no pinned key fingerprint (pass --fingerprint, or set sources.bundle_fingerprint, to the "
    "fingerprint 'gpuforge bundle' printed): the bundle's own manifest and key cannot vouch for it"
)


def verify_bundle(bundle_dir: str | Path, fingerprint: str | None = None) -> list[str]:
    """Problems of a bundle (empty: signed by the pinned key, every file there, intact, listed).

    ``fingerprint`` is the bundle key the operator pinned (40 hex digits); without one the
    bundle is not verified at all (one problem, ``NOT_ANCHORED``), never taken at its word.
    """
    out = Path(bundle_dir)
    if fingerprint is None:
        return [NOT_ANCHORED]
    anchored = anchored_manifest(out, fingerprint)
    if isinstance(anchored, str):
        return [anchored]
    raw, keyring = anchored
    try:
        manifest = json.loads(raw)
        entries = manifest["files"]
        if not isinstance(entries, list):
            raise TypeError("files is not a list")
    except (ValueError, KeyError, TypeError) as err:
        return [f"{out / MANIFEST}: cannot read the manifest ({err})"]
    if manifest.get("format") != FORMAT:
        return [
            f"{out / MANIFEST}: format {manifest.get('format')!r}, this gpuforge reads {FORMAT!r} "
            "(run gpuforge bundle again to rebuild it)"
        ]
    problems, files = _tree_problems(out)
    problems += _listing_problems(out, entries, files)
    if not problems:
        problems += _signature_problems(out, files, keyring)
    if (out / PARTIAL).exists():
        problems.append(f"{PARTIAL}/: an interrupted run left partial downloads")
    if not manifest.get("complete", False):
        problems.append(f"the manifest records an incomplete bundle ({len(manifest.get('missing', []))} missing)")
    return problems


def _listing_problems(out: Path, entries: list[Any], files: dict[str, int]) -> list[str]:
    """Each listed file present with its size and sha256; nothing pushed to nodes unlisted."""
    problems: list[str] = []
    listed: set[str] = set()
    for i, e in enumerate(entries):
        bad = manifest_entry_problem(i, e)
        if bad is not None:
            problems.append(bad)
            continue
        rel = e["path"]
        listed.add(rel)
        if rel not in files:
            problems.append(f"{rel}: missing (or not a regular file)")
        elif files[rel] != e["size"]:
            problems.append(f"{rel}: {files[rel]} bytes, the manifest says {e['size']}")
        elif hash_file(out / rel, ["sha256"])["sha256"] != e["sha256"]:
            problems.append(f"{rel}: sha256 differs from the manifest (changed or corrupted)")
    for rel in sorted(files):
        if rel.split("/", 1)[0] in PUSHED and rel not in listed:
            problems.append(f"{rel}: not in the manifest (it would be pushed to the nodes unchecked)")
    return problems

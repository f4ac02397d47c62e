"""Signatures: upstream's InRelease checked at build time; the bundle's own, checked by --verify."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from gpuforge.bundle.downloads import RepoNeed, spec_needs
from gpuforge.bundle.fetch import Fetcher
from gpuforge.bundle.layout import FORMAT, MANIFEST, MANIFEST_SIG
from gpuforge.bundle.signing import (
    BUNDLE_KEY,
    BundleSigner,
    SignatureError,
    dearmor,
    release_text,
    verify_inrelease,
)
from gpuforge.bundle.trust import UntrustedIndex, sign_repositories, signed_index
from gpuforge.bundle.verify import verify_bundle
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec import parse_spec
from gpuforge.spec.platforms import OsFamily, platform_for
from tests.bundle.conftest import RepoKey, Server, cli_env, index_repo, mirror_spec, offline_spec, run_bundle
from tests.helpers import RENDER_ONLY_BUNDLE_FINGERPRINT, bundle_fingerprint

CONTAINER = "apt/nvidia-container"
CUDA = "apt/nvidia-cuda"


def build(
    tmp_path: Path, server: Server, key: RepoKey
) -> tuple[subprocess.CompletedProcess[str], dict[str, object], Path]:
    """``gpuforge bundle`` of the test cluster from ``server``, whose repositories ``key`` signs."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mirror_spec(server.url, key.fingerprint))
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec), "-o", str(out))
    return cp, json.loads((out / "manifest.json").read_text()), out


def missing_of(m: dict[str, object]) -> dict[str, str]:
    entries = m["missing"]
    assert isinstance(entries, list)
    return {x["what"]: x["error"] for x in entries}


def container_debs(out: Path) -> list[str]:
    return sorted(p.name for p in (out / CONTAINER).glob("*.deb")) if (out / CONTAINER).is_dir() else []


def test_an_index_changed_after_signing_is_refused(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    packages = served.root / "container" / "Packages"
    packages.write_text(packages.read_text().replace("Version: 1.20.0-1", "Version: 1.20.0-9", 1))
    cp, m, out = build(tmp_path, served, repo_key)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    error = missing_of(m)[f"{CONTAINER}: Packages index"]
    assert "Packages does not match the signed Release" in error
    assert container_debs(out) == []  # nothing from an index that was not what was signed
    assert not any("/container/pool/" in r for r in served.requests)
    assert (out / CUDA / "InRelease").is_file()  # the other repository is unaffected


def test_an_unsigned_repository_is_refused(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    (served.root / "container" / "InRelease").unlink()
    cp, m, out = build(tmp_path, served, repo_key)
    assert cp.returncode == 1
    assert "it is not signed" in missing_of(m)[f"{CONTAINER}: Packages index"]
    assert container_debs(out) == []


def test_a_signature_by_another_key_is_refused(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """The repository's key is the pinned one, but its InRelease is signed by another key."""
    other = RepoKey(tmp_path / "other-gnupg", "someone-else")
    try:
        index_repo(served.root / "container", gz=False, key=other)
    finally:
        other.close()
    cp, m, out = build(tmp_path, served, repo_key)
    assert cp.returncode == 1
    error = missing_of(m)[f"{CONTAINER}: Packages index"]
    assert "does not verify with the repository key (ERRSIG)" in error and "/container/gpgkey" in error
    assert container_debs(out) == []


def test_a_mirror_serving_another_key_is_refused(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """Mirror mode: a mirror that serves its own key beside an index re-signed with it (a changed
    package listed) is refused before that key checks anything: it is not the pinned key."""
    other = RepoKey(tmp_path / "other-gnupg", "mirror-attacker")
    try:
        (served.root / "container" / "gpgkey").write_bytes(other.armored())
        index_repo(served.root / "container", gz=False, key=other)
    finally:
        other.close()
    cp, m, out = build(tmp_path, served, repo_key)
    assert cp.returncode == 1
    error = missing_of(m)[f"{CONTAINER}: Packages index"]
    assert f"holds key {other.fingerprint}, not the pinned {repo_key.fingerprint}" in error
    assert container_debs(out) == [] and not any("/container/pool/" in r for r in served.requests)
    # Without a pin of its own, a mirror is held to upstream's key: the test key is refused as well.
    spec = parse_spec(mirror_spec(served.url, None))
    need = next(n for n in spec_needs(spec).repos.values() if n.kind == "nvidia-cuda")
    assert need.fingerprint == table.APT_REPO_FINGERPRINTS["nvidia-cuda"]
    with pytest.raises(UntrustedIndex, match=f"holds key {repo_key.fingerprint}, not the pinned"):
        signed_index(Fetcher(10), need, {})


def test_release_with_a_detached_signature_is_accepted(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    repo = served.root / "container"
    text = verify_inrelease((repo / "InRelease").read_bytes(), dearmor((repo / "gpgkey").read_bytes())).text
    (repo / "InRelease").unlink()
    (repo / "Release").write_text(text)
    (repo / "Release.gpg").write_bytes(repo_key.gpg("--detach-sign", "--output", "-", str(repo / "Release")))
    cp, m, out = build(tmp_path, served, repo_key)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert len(container_debs(out)) == 4
    sources = {r["path"]: r["sources"] for r in m["repositories"]}  # type: ignore[attr-defined]
    assert sources[CONTAINER][0]["signed_by"] == repo_key.fingerprint
    # A detached signature that does not match the Release text is refused.
    (repo / "Release").write_text(text.replace("Origin: test upstream", "Origin: test upstream!"))
    shutil.rmtree(out)
    cp, m, out = build(tmp_path, served, repo_key)
    assert "does not verify with the repository key (BADSIG)" in missing_of(m)[f"{CONTAINER}: Packages index"]


def test_only_the_pinned_key_is_accepted(served: Server, repo_key: RepoKey) -> None:
    """Upstream mode requires the cited fingerprint; a mirror the key the spec pins for it, else
    upstream's: a key served beside a mirror is never accepted for being there."""
    spec = parse_spec(offline_spec(Path("/nonexistent"), RENDER_ONLY_BUNDLE_FINGERPRINT))
    needs = {(n.kind, n.fmt): n for n in spec_needs(spec).repos.values()}  # offline: fetched from upstream
    for kind in ("nvidia-cuda", "nvidia-container"):
        assert needs[(kind, "apt")].fingerprint == table.APT_REPO_FINGERPRINTS[kind]
        assert (needs[(kind, "apt")].key_url or "").startswith("https://")
    assert needs[("nvidia-container", "apt")].key_url == "https://nvidia.github.io/libnvidia-container/gpgkey"
    mirror = parse_spec(mirror_spec(served.url, repo_key.fingerprint))
    for need in spec_needs(mirror).repos.values():
        assert need.fingerprint == repo_key.fingerprint and (need.key_url or "").startswith(served.url)
    unpinned = parse_spec(mirror_spec(served.url, None))
    assert {n.kind: n.fingerprint for n in spec_needs(unpinned).repos.values()} == {
        "nvidia-cuda": table.APT_REPO_FINGERPRINTS["nvidia-cuda"],
        "nvidia-container": table.APT_REPO_FINGERPRINTS["nvidia-container"],
    }

    base = f"{served.url}/container"
    need = RepoNeed(
        "nvidia-container", "apt", base, None, "ubuntu2404", platform_for(OsFamily.UBUNTU2404), key_url=f"{base}/gpgkey"
    )
    with pytest.raises(UntrustedIndex, match="no fingerprint is pinned"):
        signed_index(Fetcher(10), need, {})
    need.fingerprint = table.APT_REPO_FINGERPRINTS["nvidia-container"]
    with pytest.raises(UntrustedIndex, match=f"holds key {repo_key.fingerprint}, not the pinned"):
        signed_index(Fetcher(10), need, {})
    need.fingerprint = repo_key.fingerprint
    assert "nvidia-container-toolkit" in signed_index(Fetcher(10), need, {}).text


def _reseal(out: Path, signer: BundleSigner, relisted: list[str]) -> None:
    """Sign the bundle's repositories and its manifest with ``signer``, ``relisted`` files recorded
    in the manifest as they are now (what the operator's own key would vouch for)."""

    def write(rel: str, data: bytes) -> None:
        (out / rel).write_bytes(data)

    data = json.loads((out / MANIFEST).read_text())
    for rel in relisted:
        entry = next(f for f in data["files"] if f["path"] == rel)
        entry["size"] = (out / rel).stat().st_size
        entry["sha256"] = hashlib.sha256((out / rel).read_bytes()).hexdigest()
    raw = json.dumps(data).encode()
    write(MANIFEST, raw)
    write(MANIFEST_SIG, signer.detach_sign(raw))


def test_verify_checks_the_bundles_signatures(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """Under a manifest the pinned key signed, each repository's signature must still be by that
    key and cover its index as it is."""
    cp, _, out = build(tmp_path, served, repo_key)
    assert cp.returncode == 0 and verify_bundle(out, bundle_fingerprint(out)) == []
    signed = [f"{CONTAINER}/InRelease", f"{CUDA}/InRelease", BUNDLE_KEY]
    with BundleSigner("the operator's test key") as signer:  # stands for the build's key, gone now
        pin = signer.fingerprint()
        sign_repositories(signer, out, [CONTAINER, CUDA], lambda rel, data: (out / rel).write_bytes(data))
        _reseal(out, signer, signed)
        assert verify_bundle(out, pin) == []
        packages = out / CONTAINER / "Packages"
        original = packages.read_bytes()
        packages.write_bytes(original + b"\n")
        _reseal(out, signer, [f"{CONTAINER}/Packages"])
        assert verify_bundle(out, pin) == [f"{CONTAINER}/InRelease: does not cover {CONTAINER}/Packages as it is"]
        packages.write_bytes(original)
        _reseal(out, signer, [f"{CONTAINER}/Packages"])
        assert verify_bundle(out, pin) == []
        # A repository signed by another key than the pinned bundle key.
        inrelease = out / CONTAINER / "InRelease"
        inrelease.write_bytes(repo_key.clearsign(release_text(CONTAINER, {"Packages": original})))
        _reseal(out, signer, [f"{CONTAINER}/InRelease"])
        assert verify_bundle(out, pin) == [
            f"{CONTAINER}/InRelease: the signature does not verify with the repository key (ERRSIG)"
        ]
        # A bundle of an earlier format is refused with what to do.
        data = json.loads((out / MANIFEST).read_text())
        data["format"] = "gpuforge-bundle/3"
        raw = json.dumps(data).encode()
        (out / MANIFEST).write_bytes(raw)
        (out / MANIFEST_SIG).write_bytes(signer.detach_sign(raw))
    [problem] = verify_bundle(out, pin)
    assert f"format 'gpuforge-bundle/3', this gpuforge reads {FORMAT!r}" in problem and "bundle again" in problem


def test_the_build_key_lives_in_a_private_directory_and_is_gone_after(tmp_path: Path) -> None:
    with BundleSigner("gpuforge bundle test") as signer:
        home = Path(signer.home)
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert any((home / "private-keys-v1.d").iterdir())
        key = signer.public_key()
        signed = signer.clearsign("Origin: gpuforge\n")
    assert not home.exists()
    assert b"PRIVATE" not in key and key[:1] != b"-"  # binary public keyring, no secret part
    assert verify_inrelease(signed, key).text == "Origin: gpuforge\n"
    with pytest.raises(SignatureError, match="the signature does not verify"):
        verify_inrelease(signed.replace(b"Origin: gpuforge", b"Origin: gpuforgE"), key)


def test_bundle_without_gpg_is_refused_before_fetching(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mirror_spec(served.url, repo_key.fingerprint))
    bare = tmp_path / "bin"
    bare.mkdir()
    cp = run_bundle(str(spec), "-o", str(tmp_path / "out"), env={**cli_env(), "PATH": str(bare)})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "gpg, gpgv, gpgconf, which this host lacks: apt-get install gnupg" in cp.stderr
    assert "Traceback" not in cp.stderr
    assert served.requests == [] and not (tmp_path / "out").exists()

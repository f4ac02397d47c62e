"""Signatures: upstream's InRelease checked at build time; the bundle's own, checked by --verify."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from gpuforge.bundle.fetch import Fetcher
from gpuforge.bundle.layout import FORMAT
from gpuforge.bundle.needs import RepoNeed
from gpuforge.bundle.signing import (
    BundleSigner,
    SignatureError,
    dearmor,
    release_text,
    verify_inrelease,
)
from gpuforge.bundle.trust import UntrustedIndex, signed_index
from gpuforge.bundle.verify import verify_bundle
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec import parse_spec
from gpuforge.spec.model import OsFamily
from tests.bundle.conftest import RepoKey, Server, cli_env, mirror_spec, offline_spec, run_bundle

CONTAINER = "apt/nvidia-container"
CUDA = "apt/nvidia-cuda"


def build(tmp_path: Path, server: Server) -> tuple[subprocess.CompletedProcess[str], dict[str, object], Path]:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mirror_spec(server.url))
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec), "-o", str(out))
    return cp, json.loads((out / "manifest.json").read_text()), out


def missing_of(m: dict[str, object]) -> dict[str, str]:
    entries = m["missing"]
    assert isinstance(entries, list)
    return {x["what"]: x["error"] for x in entries}


def container_debs(out: Path) -> list[str]:
    return sorted(p.name for p in (out / CONTAINER).glob("*.deb")) if (out / CONTAINER).is_dir() else []


def test_an_index_changed_after_signing_is_refused(served: Server, tmp_path: Path) -> None:
    packages = served.root / "container" / "Packages"
    packages.write_text(packages.read_text().replace("Version: 1.17.8-1", "Version: 1.17.8-9", 1))
    cp, m, out = build(tmp_path, served)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    error = missing_of(m)[f"{CONTAINER}: Packages index"]
    assert "Packages does not match the signed Release" in error
    assert container_debs(out) == []  # nothing from an index that was not what was signed
    assert not any("/container/pool/" in r for r in served.requests)
    assert (out / CUDA / "InRelease").is_file()  # the other repository is unaffected


def test_an_unsigned_repository_is_refused(served: Server, tmp_path: Path) -> None:
    (served.root / "container" / "InRelease").unlink()
    cp, m, out = build(tmp_path, served)
    assert cp.returncode == 1
    assert "it is not signed" in missing_of(m)[f"{CONTAINER}: Packages index"]
    assert container_debs(out) == []


def test_a_signature_by_another_key_is_refused(served: Server, tmp_path: Path) -> None:
    other = RepoKey(tmp_path / "other-gnupg", "someone-else")
    try:
        (served.root / "container" / "gpgkey").write_bytes(other.armored())
    finally:
        other.close()
    cp, m, out = build(tmp_path, served)
    assert cp.returncode == 1
    error = missing_of(m)[f"{CONTAINER}: Packages index"]
    assert "does not verify with the repository key (ERRSIG)" in error and "/container/gpgkey" in error
    assert container_debs(out) == []


def test_release_with_a_detached_signature_is_accepted(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    repo = served.root / "container"
    text = verify_inrelease((repo / "InRelease").read_bytes(), dearmor((repo / "gpgkey").read_bytes())).text
    (repo / "InRelease").unlink()
    (repo / "Release").write_text(text)
    (repo / "Release.gpg").write_bytes(repo_key.gpg("--detach-sign", "--output", "-", str(repo / "Release")))
    cp, m, out = build(tmp_path, served)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert len(container_debs(out)) == 4
    sources = {r["path"]: r["sources"] for r in m["repositories"]}  # type: ignore[attr-defined]
    assert sources[CONTAINER][0]["signed_by"] == repo_key.fingerprint
    # A detached signature that does not match the Release text is refused.
    (repo / "Release").write_text(text.replace("Origin: test upstream", "Origin: test upstream!"))
    shutil.rmtree(out)
    cp, m, out = build(tmp_path, served)
    assert "does not verify with the repository key (BADSIG)" in missing_of(m)[f"{CONTAINER}: Packages index"]


def test_from_upstream_only_nvidias_key_is_accepted(served: Server, repo_key: RepoKey) -> None:
    """Upstream mode requires the cited fingerprint; a mirror's own key is recorded, not required."""
    spec = parse_spec(offline_spec(Path("/nonexistent")).replace("mode: offline", "mode: upstream"))
    for kind, repo in (
        ("nvidia-cuda", src.cuda_repo(spec, OsFamily.UBUNTU2404)),
        ("nvidia-container", src.container_repo(spec, OsFamily.UBUNTU2404)),
    ):
        key_url, fingerprint = src.apt_release_key(spec, repo)
        assert fingerprint == table.APT_REPO_FINGERPRINTS[kind]
        assert key_url is not None and key_url.startswith("https://")
    assert src.apt_release_key(spec, src.container_repo(spec, OsFamily.UBUNTU2404))[0] == (
        "https://nvidia.github.io/libnvidia-container/gpgkey"
    )
    mirror = parse_spec(mirror_spec(served.url))
    key_url, fingerprint = src.apt_release_key(mirror, src.cuda_repo(mirror, OsFamily.UBUNTU2404))
    assert (key_url, fingerprint) == (f"{served.url}/cuda/3bf863cc.pub", None)

    base = f"{served.url}/container"
    need = RepoNeed("nvidia-container", "apt", base, None, "ubuntu2404", key_url=f"{base}/gpgkey")
    need.fingerprint = table.APT_REPO_FINGERPRINTS["nvidia-container"]
    with pytest.raises(UntrustedIndex, match=f"signed by key {repo_key.fingerprint}, not by the repository's key"):
        signed_index(Fetcher(10), need, {})
    need.fingerprint = repo_key.fingerprint
    assert "nvidia-container-toolkit" in signed_index(Fetcher(10), need, {}).text


def test_verify_checks_the_bundles_signatures(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    cp, _, out = build(tmp_path, served)
    assert cp.returncode == 0 and verify_bundle(out) == []

    def relist(rel: str) -> None:
        """Record ``rel`` in the manifest as it is now (what a careless hand edit would do)."""
        data = json.loads((out / "manifest.json").read_text())
        entry = next(f for f in data["files"] if f["path"] == rel)
        entry["size"] = (out / rel).stat().st_size
        entry["sha256"] = hashlib.sha256((out / rel).read_bytes()).hexdigest()
        (out / "manifest.json").write_text(json.dumps(data))

    packages = out / CONTAINER / "Packages"
    original = packages.read_bytes()
    packages.write_bytes(original + b"\n")
    relist(f"{CONTAINER}/Packages")
    assert verify_bundle(out) == [f"{CONTAINER}/InRelease: does not cover {CONTAINER}/Packages as it is"]
    packages.write_bytes(original)
    relist(f"{CONTAINER}/Packages")
    assert verify_bundle(out) == []
    # Signed by another key than the bundle's.
    inrelease = out / CONTAINER / "InRelease"
    inrelease.write_bytes(repo_key.clearsign(release_text(CONTAINER, {"Packages": original})))
    relist(f"{CONTAINER}/InRelease")
    assert verify_bundle(out) == [
        f"{CONTAINER}/InRelease: the signature does not verify with the repository key (ERRSIG)"
    ]
    # A bundle of the earlier, unsigned format is refused with what to do.
    data = json.loads((out / "manifest.json").read_text())
    data["format"] = "gpuforge-bundle/1"
    (out / "manifest.json").write_text(json.dumps(data))
    [problem] = verify_bundle(out)
    assert f"format 'gpuforge-bundle/1', this gpuforge reads {FORMAT!r}" in problem and "bundle again" in problem


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


def test_bundle_without_gpg_is_refused_before_fetching(served: Server, tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mirror_spec(served.url))
    bare = tmp_path / "bin"
    bare.mkdir()
    cp = run_bundle(str(spec), "-o", str(tmp_path / "out"), env={**cli_env(), "PATH": str(bare)})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "gpg, gpgv, gpgconf, which this host lacks: apt-get install gnupg" in cp.stderr
    assert "Traceback" not in cp.stderr
    assert served.requests == [] and not (tmp_path / "out").exists()

"""``gpuforge bundle`` takes a release file only with a sha256 known before it is fetched.

Against the test upstream on 127.0.0.1: without ``sources.artifact_sha256`` no release file is
downloaded, each is listed as missing with how to pin it; a pinned file served with other bytes
is refused; the pinned bytes are bundled with where their sha256 was known from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gpuforge.bundle.build import build_bundle
from gpuforge.spec import parse_spec
from tests.bundle.conftest import ARTIFACTS, RepoKey, Server, mirror_spec


def build(tmp_path: Path, text: str) -> dict[str, Any]:
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(text)
    out = tmp_path / "bundle"
    build_bundle(parse_spec(text), spec_file, out, timeout=20)
    manifest: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return manifest


def without_pins(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "artifact_sha256" not in line) + "\n"


def test_the_bundle_refuses_release_files_without_a_known_sha256(
    served: Server, repo_key: RepoKey, tmp_path: Path
) -> None:
    m = build(tmp_path, without_pins(mirror_spec(served.url, repo_key.fingerprint)))
    listed = {f["path"] for f in m["files"]}
    missing = {x["what"]: x for x in m["missing"]}
    for name in ARTIFACTS:
        assert f"artifacts/{name}" not in listed
        error = missing[f"artifacts/{name}"]["error"]
        assert f"no sha256 is known for {name}" in error and "sources.artifact_sha256" in error
    assert not any("/artifacts/" in p for p in served.requests)  # refused before any download
    assert m["complete"] is False
    assert not (tmp_path / "bundle" / "artifacts").exists()


def test_a_pinned_file_served_with_other_bytes_is_refused(served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    name = "pyxis-0.24.0.tar.gz"
    (served.root / "artifacts" / name).write_bytes(b"a tarball someone put on the mirror\n")
    m = build(tmp_path, mirror_spec(served.url, repo_key.fingerprint))
    missing = {x["what"]: x for x in m["missing"]}
    assert (
        f"does not match the published {hashlib.sha256(ARTIFACTS[name]).hexdigest()}"
        in (missing[f"artifacts/{name}"]["error"])
    )
    assert not (tmp_path / "bundle" / "artifacts" / name).exists()
    files = {f["path"]: f for f in m["files"]}
    other = "artifacts/enroot_4.1.2-1_amd64.deb"
    assert files[other]["sha256"] == hashlib.sha256(ARTIFACTS["enroot_4.1.2-1_amd64.deb"]).hexdigest()
    assert files[other]["checksum"] == "sha256 known beforehand: pinned in the spec (sources.artifact_sha256)"

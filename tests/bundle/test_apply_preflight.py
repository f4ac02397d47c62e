"""apply refuses an offline bundle that does not match its signed manifest, before touching any host
(tests/bundle/test_bundle_anchor.py: a manifest rewritten and re-signed with another key)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from tests import yaml_text
from tests.conftest import REPO, run_cli
from tests.helpers import RENDER_ONLY_BUNDLE_FINGERPRINT, bundle_fingerprint, write_bundle_manifest


def test_tampered_offline_bundle_stops_apply_before_any_host(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "artifacts").mkdir(parents=True)
    (bundle / "artifacts" / "enroot_4.1.2-1_amd64.deb").write_bytes(b"enroot package bytes")
    write_bundle_manifest(bundle)
    (bundle / "artifacts" / "enroot_4.1.2-1_amd64.deb").write_bytes(b"tampered bytes!!!!!!")
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"] = {"mode": "offline", "bundle_dir": str(bundle), "bundle_fingerprint": bundle_fingerprint(bundle)}
    spec = tmp_path / "offline.yaml"
    spec.write_text(yaml_text.dump(data))
    cp = run_cli("apply", "--yes", str(spec), env={"GPUFORGE_STATE_DIR": str(tmp_path / "state")})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "sources.bundle_dir: bundle" in cp.stderr and "sha256 differs from the manifest" in cp.stderr
    assert "Traceback" not in cp.stderr
    assert not (tmp_path / "state" / "applied").exists()  # nothing was applied or recorded


def test_offline_artifacts_are_checked_on_the_node_against_the_manifest(tmp_path: Path) -> None:
    from gpuforge.render.nvidia_sources import artifact, fetch_command
    from gpuforge.spec import parse_spec

    data = b"enroot package bytes"
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "enroot_4.1.2-1_amd64.deb").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    files = [{"path": "artifacts/enroot_4.1.2-1_amd64.deb", "size": len(data), "sha256": sha}]
    (tmp_path / "manifest.json").write_text(json.dumps({"files": files}))
    spec_data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    spec_data["sources"] = {
        "mode": "offline",
        "bundle_dir": str(tmp_path),
        "bundle_fingerprint": RENDER_ONLY_BUNDLE_FINGERPRINT,
        "artifact_sha256": {"enroot_4.1.2-1_amd64.deb": sha},  # what the operator pinned: the manifest agrees
    }
    a = artifact(parse_spec(yaml_text.dump(spec_data)), "enroot_4.1.2-1_amd64.deb", None)
    assert a.sha256 == sha and a.local is not None
    assert f"{sha}  /var/lib/gpuforge/bundle/enroot_4.1.2-1_amd64.deb" in fetch_command(a)
    assert "sha256sum -c" in fetch_command(a)

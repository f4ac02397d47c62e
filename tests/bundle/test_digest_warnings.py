"""``check`` warns about each release file the nodes need whose sha256 nobody knows (its deploy step
is skipped), naming the setting that pins it and what stays uninstalled; ``--strict`` exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.bundle.digest_warnings import artifact_warnings, representatives
from gpuforge.bundle.downloads import spec_needs
from gpuforge.spec import resolve_nodes
from tests import yaml_text
from tests.helpers import INVENTORIES, variant

REPO = Path(__file__).resolve().parents[2]
PYXIS = "pyxis-0.24.0.tar.gz"
SLURM_FILES = [
    PYXIS,
    "enroot_4.1.2-1_amd64.deb",
    "enroot+caps_4.1.2-1_amd64.deb",
    "nvidia-mig-manager_0.15.0-1_amd64.deb",
]
TEST_SHA = "ab" * 32  # a test's pin, not a claim about any upstream file


def check(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", "check", str(path), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def pin(files: list[str]) -> Any:
    def change(data: dict[str, Any]) -> None:
        data.setdefault("sources", {})["artifact_sha256"] = {f: TEST_SHA for f in files}

    return change


def test_the_slurm_example_warns_about_pyxis_enroot_and_the_mig_manager() -> None:
    spec = variant("slurm-h100", lambda d: None)
    found = {w.path: [] for w in artifact_warnings(spec)}
    messages = [w.message for w in artifact_warnings(spec)]
    assert list(found) == ["sources.artifact_sha256"]
    assert [m.split(",")[0] for m in messages] == [f"no sha256 is known for {f}" for f in SLURM_FILES]
    assert messages[0] == (
        f"no sha256 is known for {PYXIS}, so pyxis (Slurm's container plugin: srun --container-image) is not "
        "installed (needed on 67 node(s): ctl01,gpu[001-064],login[01-02]); pin the sha256 of the file you trust "
        f"in the spec: sources.artifact_sha256: {{{PYXIS}: <64 hex digits>}}"
    )


def test_a_pinned_file_is_not_warned_about() -> None:
    assert artifact_warnings(variant("slurm-h100", pin(SLURM_FILES))) == []
    left = artifact_warnings(variant("slurm-h100", pin(SLURM_FILES[1:])))
    assert [w.message.split(",")[0] for w in left] == [f"no sha256 is known for {PYXIS}"]


def test_kubernetes_add_ons_without_a_digest_are_named() -> None:
    messages = [w.message for w in artifact_warnings(variant("k8s-gpu-operator", lambda d: None))]
    assert any(m.startswith("no sha256 is known for gpu-operator-v26.7.0.tgz, so the GPU Operator is not installed")
               for m in messages)  # fmt: skip
    assert any(m.startswith("no sha256 is known for kueue-v0.19.2-manifests.yaml, so Kueue is not installed")
               for m in messages)  # fmt: skip
    # helm and flannel have cited digests (gpuforge.spec.artifact_digests): no warning
    assert not [m for m in messages if "helm-" in m or "flannel" in m]


def test_check_prints_the_warning_and_strict_exits_2(tmp_path: Path) -> None:
    data = yaml.safe_load((INVENTORIES / "slurm-h100.yaml").read_text())
    pin(SLURM_FILES[1:])(data)
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text.dump(data))
    relaxed = check(path)
    assert relaxed.returncode == 0, relaxed.stderr
    assert f"{path}: warning: sources.artifact_sha256: no sha256 is known for {PYXIS}, so pyxis" in relaxed.stderr
    strict = check(path, "--strict")
    assert strict.returncode == 2 and strict.stderr.splitlines()[-1] == "error: --strict: 1 warning(s)"
    doc = json.loads(check(path, "--json").stdout)
    assert [w["path"] for w in doc["warnings"]] == ["sources.artifact_sha256"] and doc["ok"] is True


@pytest.mark.parametrize("name", ["slurm-h100", "k8s-gpu-operator", "lab-k8s", "vagrant"])
def test_one_node_per_group_finds_what_every_node_needs(name: str) -> None:
    """The warnings ask spec_needs about one node per group (and the first control plane): the
    files and the nodes they name are those of asking about every node."""
    spec = variant(name, lambda d: None)
    reps, members = representatives(spec)
    every = {f: sorted(n.nodes) for f, n in spec_needs(spec).artifacts.items()}
    few = {f: sorted(m for r in n.nodes for m in members[r]) for f, n in spec_needs(spec, reps).artifacts.items()}
    assert few == every and len(reps) < len(resolve_nodes(spec))

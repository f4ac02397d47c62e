"""Offline mode on a bundle made by ``gpuforge bundle``: the NVIDIA layers of a fresh node
take every package and release file from the bundle, never from an upstream URL (pure:
gpuforge.deploy.layers.nvidia's layer builders and ``plan_layer`` on facts of a node with nothing installed)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bundle.debian import parse_packages
from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, Step, plan_layer
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia import DCGM_EXPORTER_BIN
from gpuforge.spec import parse_spec, resolve_nodes
from tests.bundle.conftest import ARTIFACTS, RepoKey, Server, mirror_spec, offline_spec, run_bundle
from tests.helpers import bundle_fingerprint

ON_NODE = src.BUNDLE_ON_NODE


@pytest.fixture(scope="module")
def bundle(upstream: Path, repo_key: RepoKey, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A complete bundle of the test cluster, built by the CLI from a loopback mirror."""
    work = tmp_path_factory.mktemp("offline")
    server = Server(upstream)
    server.start()
    try:
        spec_file = work / "mirror.yaml"
        spec_file.write_text(mirror_spec(server.url, repo_key.fingerprint))
        cp = run_bundle(str(spec_file), "-o", str(work / "bundle"))
        assert cp.returncode == 0, cp.stdout + cp.stderr
    finally:
        server.stop()
    yield work / "bundle"
    shutil.rmtree(work, ignore_errors=True)


def plan_node(bundle: Path, node: str) -> dict[str, list[Step]]:
    """Every NVIDIA layer's steps on a fresh GPU node (H100s on the bus, nothing installed)."""
    spec = parse_spec(offline_spec(bundle, bundle_fingerprint(bundle)))
    n = next(x for x in resolve_nodes(spec) if x.name == node)
    ctx = nvidia_needs.Ctx.build(spec, n, HostFacts(gpus=["2330"] * 8, package_tool="dpkg"), name=f"test-{node}")
    return {layer.name: plan_layer(layer, LayerFacts())[0] for _, layer in nv.nvidia_layers(ctx)}


def test_fresh_node_installs_everything_from_the_bundle(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    sums = {f["path"]: f["sha256"] for f in manifest["files"]}
    plans = plan_node(bundle, "gpu01")
    steps = [s for layer in plans.values() for s in layer]

    # Nothing is unavailable, nothing is fetched from anywhere.
    assert [s.summary for s in steps if s.kind == "unavailable"] == []
    for s in steps:
        assert not re.search(r"\b(curl|wget) +-", s.command or ""), s  # (curl the OS package is fine)
        assert "http://" not in (s.command or "") and "https://" not in (s.command or ""), s
    uploads = {s.upload.path: s.upload.data for s in steps if s.upload is not None}
    for path, data in uploads.items():
        if path.startswith(("/etc/apt/sources.list.d/", "/etc/apt/preferences.d/")):
            assert b"http" not in data, path

    # The repositories: every bundle file pushed under /var/lib/gpuforge/bundle, as in the manifest.
    pushed = {p: d for p, d in uploads.items() if p.startswith(ON_NODE + "/")}
    for kind in ("nvidia-cuda", "nvidia-container"):
        local = sorted(p.relative_to(bundle).as_posix() for p in (bundle / "apt" / kind).iterdir())
        assert local, kind
        for rel in local:
            data = pushed[f"{ON_NODE}/{rel}"]
            assert data == (bundle / rel).read_bytes()
            assert hashlib.sha256(data).hexdigest() == sums[rel]
    signed = f"deb [signed-by={src.BUNDLE_KEYRING}] file:{ON_NODE}"
    assert uploads[src.CUDA_LIST] == f"{signed}/apt/nvidia-cuda ./\n".encode()
    assert uploads[src.CONTAINER_LIST] == f"{signed}/apt/nvidia-container ./\n".encode()
    # The bundle's own key goes where signed-by names it; no key is downloaded from anywhere.
    assert uploads[src.BUNDLE_KEYRING] == (bundle / "apt" / "gpuforge-bundle.gpg").read_bytes()
    assert not any(s.kind == "keyring" for s in plans["nvidia-repos"])
    assert [s.kind for s in plans["nvidia-repos"]][-1] == "apt-update"

    # Release files: pushed from artifacts/ and installed from where they were pushed.
    for name in ("enroot_4.1.2-1_amd64.deb", "enroot+caps_4.1.2-1_amd64.deb", "pyxis-0.24.0.tar.gz"):
        assert uploads[f"{ON_NODE}/{name}"] == ARTIFACTS[name]
    assert DCGM_EXPORTER_BIN not in uploads  # dcgm-exporter is a CUDA-repository package now
    enroot = next(s for s in plans["enroot"] if s.kind == "install")
    assert "from the bundle" in enroot.summary
    assert f"test -s {ON_NODE}/enroot_4.1.2-1_amd64.deb" in (enroot.command or "")
    pyxis = next(s for s in plans["pyxis"] if s.kind == "build")
    assert f"test -s {ON_NODE}/pyxis-0.24.0.tar.gz" in (pyxis.command or "")


def test_every_nvidia_package_the_plan_installs_is_in_the_bundle(bundle: Path) -> None:
    """Package names (and =versions) in the planned apt installs resolve in the bundle's indexes."""
    index = {}
    for kind in ("nvidia-cuda", "nvidia-container"):
        for s in parse_packages((bundle / "apt" / kind / "Packages").read_text()):
            index[s.package] = s.version
    plans = plan_node(bundle, "gpu02")
    installs = [s.command or "" for layer in plans.values() for s in layer if s.kind in ("install", "upgrade")]
    nvidia_specs = [
        word
        for cmd in installs
        for word in re.findall(r"[^\s;'{}|&]+", cmd)
        if word.startswith(("nvidia-", "libnvidia-", "datacenter-gpu-manager-")) and "/" not in word
    ]
    assert nvidia_specs, installs
    for spec in nvidia_specs:
        name, _, version = spec.partition("=")
        assert name in index, f"{name} is installed but not in the bundle"
        if version:
            assert index[name] == version
    assert {s.partition("=")[0] for s in nvidia_specs} >= {
        "nvidia-dkms-550-open",
        "nvidia-kernel-open-550",  # the open flavor below 560 (issue 32 item 4: no nvidia-open)
        "nvidia-driver-550-open",
        "nvidia-container-toolkit",
        "libnvidia-container1",
        "datacenter-gpu-manager-4-core",
        "datacenter-gpu-manager-4-proprietary",
    }


def test_controller_gets_nothing_from_the_bundle(bundle: Path) -> None:
    plans = plan_node(bundle, "ctl01")
    assert all(steps == [] for steps in plans.values())

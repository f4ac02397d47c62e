"""``gpuforge bundle`` for a Kubernetes spec: the Kubernetes packages (from a pkgs.k8s.io-layout mirror,
with their dependencies), helm, the GPU Operator chart and the add-ons' manifests as release files,
and the images a site must mirror; then the offline spec installs from that bundle only.

Every request goes to 127.0.0.1 (the conftest's loopback server).
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bundle.verify import verify_bundle
from gpuforge.render import k8s_artifacts as arts
from gpuforge.render import k8s_packages as pkgs
from gpuforge.spec import load_spec, resolve_nodes
from tests.bundle.conftest import REPO, RepoKey, Server, artifact_pins, flat_repo, run_bundle

K8S_DIR = "k8s/core:/stable:/v1.31/deb"
K8S_DEBS = [
    ("kubelet", "1.31.4-1.1", "kubernetes-cni (>= 1.2.0), iptables", ""),
    ("kubelet", "1.31.5-1.1", "kubernetes-cni (>= 1.2.0), iptables", ""),
    ("kubeadm", "1.31.4-1.1", "cri-tools (>= 1.30.0)", ""),
    ("kubeadm", "1.31.5-1.1", "cri-tools (>= 1.30.0)", ""),
    ("kubectl", "1.31.4-1.1", "", ""),
    ("kubectl", "1.31.5-1.1", "", ""),
    ("cri-tools", "1.31.1-1.1", "", ""),
    ("kubernetes-cni", "1.5.1-1.1", "", ""),
]
UPSTREAM_CHART = REPO.parent / "shared" / "reference" / "upstream" / "gpu-operator"
FLANNEL = """\
apiVersion: v1
kind: Namespace
metadata: {name: kube-flannel}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel-ds, namespace: kube-flannel}
spec:
  template:
    spec:
      initContainers:
      - {name: install-cni-plugin, image: docker.io/flannel/flannel-cni-plugin:v1.6.0-flannel1}
      containers:
      - {name: kube-flannel, image: docker.io/flannel/flannel:v0.26.1}
"""


def chart_archive() -> bytes:
    """The GPU Operator chart as ``helm package`` lays it out (gpu-operator/Chart.yaml, values.yaml), from
    upstream's files at v26.7.0; Chart.yaml's git placeholders set to the release, as the published chart has."""
    values = (UPSTREAM_CHART / "values.yaml").read_bytes()
    chart = (UPSTREAM_CHART / "Chart.yaml").read_text()
    chart = chart.replace("version: v1.0.0-devel", "version: v26.7.0").replace(
        'appVersion: "main-latest"', 'appVersion: "v26.7.0"'
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("gpu-operator/Chart.yaml", chart.encode()), ("gpu-operator/values.yaml", values)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


ADDON_FILES = {
    "kube-flannel-v0.28.9.yml": FLANNEL.encode(),
    "helm-v4.2.4-linux-amd64.tar.gz": b"fake helm tarball\n",
    "gpu-operator-v26.7.0.tgz": chart_archive(),
    "kueue-v0.19.2-manifests.yaml": b"apiVersion: v1\nkind: Namespace\nmetadata: {name: kueue-system}\n",
}
SPEC = """\
cluster: {{name: kb, scheduler: kubernetes, os: ubuntu24.04}}
sources:
{sources}
versions:
  driver: {{version: 550.163.01, flavor: open, source: nvidia}}
  container_toolkit: 1.20.0
  kubernetes: 1.31.4
dcgm: {{enabled: false, exporter: false}}
node_groups:
  - {{name: cp, hosts: kcp1, address_start: 192.0.2.10, roles: [k8s-control-plane]}}
  - name: gpu
    hosts: kgpu1
    address_start: 192.0.2.20
    roles: [k8s-worker]
    hardware: {{gpu: {{model: H100-80GB, count: 8}}}}
container_runtime: {{engine: containerd, cdi: true}}
kubernetes:
  batch_queue:
    kind: kueue
    tenants: [{{name: vision, namespace: team-vision, gpu_quota: 8}}]
"""


@pytest.fixture
def k8s_served(upstream: Path, repo_key: RepoKey, tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "served"
    shutil.copytree(upstream, root)
    flat_repo(root / K8S_DIR, K8S_DEBS, tmp_path / "debs", gz=False, key=repo_key, key_file="Release.key")
    for name, data in ADDON_FILES.items():
        (root / "artifacts" / name).write_bytes(data)
    server = Server(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def write(tmp_path: Path, name: str, sources: str) -> Path:
    path = tmp_path / name
    path.write_text(SPEC.format(sources=sources))
    return path


def test_a_kubernetes_bundle_installs_offline(k8s_served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    base, key = k8s_served.url, repo_key.fingerprint
    mirror = write(
        tmp_path,
        "mirror.yaml",
        f"  mode: mirror\n  mirrors:\n    nvidia_cuda: {base}/cuda\n    nvidia_container: {base}/container\n"
        f"    artifacts: {base}/artifacts\n    kubernetes: {base}/k8s\n"
        f"  mirror_keys: {{nvidia_cuda: {key}, nvidia_container: {key}, kubernetes: {key}}}"
        + artifact_pins(ADDON_FILES),
    )
    out = tmp_path / "bundle"
    cp = run_bundle(str(mirror), "-o", str(out))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is True, manifest["missing"]

    # The pinned patch and its dependencies from the same repository; not the newer patch.
    debs = sorted(p.name for p in (out / "apt" / "kubernetes").glob("*.deb"))
    assert debs == [
        "cri-tools_1.31.1-1.1_amd64.deb",
        "kubeadm_1.31.4-1.1_amd64.deb",
        "kubectl_1.31.4-1.1_amd64.deb",
        "kubelet_1.31.4-1.1_amd64.deb",
        "kubernetes-cni_1.5.1-1.1_amd64.deb",
    ]
    repo = next(r for r in manifest["repositories"] if r["path"] == "apt/kubernetes")
    # iptables comes from the OS archive, as on a node: recorded, not bundled
    assert repo["external"] == [{"dependency": "iptables", "required_by": ["kubelet"]}]
    for name, data in ADDON_FILES.items():
        assert (out / "artifacts" / name).read_bytes() == data
    pin = manifest["signing"]["fingerprint"]  # what 'gpuforge bundle' printed to pin
    assert verify_bundle(out, pin) == []

    # The images a site mirrors: kubeadm's, the manifests', the GPU Operator components this
    # cluster enables, read from the chart's own values.yaml (host driver and toolkit: not those),
    # NFD (the chart's dependency; this archive carries no subchart: the pinned dependency version),
    # and what gpuforge validate's cluster probe runs (CUDA sample; Kueue admission job).
    listed = [line.split("\t") for line in (out / "images.txt").read_text().splitlines() if line[:1] != "#"]
    images = {image: why for image, why, _ in listed}
    assert images == {
        "registry.k8s.io/kube-apiserver:v1.31.4": "kubeadm",
        "registry.k8s.io/kube-controller-manager:v1.31.4": "kubeadm",
        "registry.k8s.io/kube-scheduler:v1.31.4": "kubeadm",
        "registry.k8s.io/kube-proxy:v1.31.4": "kubeadm",
        "docker.io/flannel/flannel-cni-plugin:v1.6.0-flannel1": "kube-flannel-v0.28.9.yml",
        "docker.io/flannel/flannel:v0.26.1": "kube-flannel-v0.28.9.yml",
        "nvcr.io/nvidia/gpu-operator:v26.7.0": "GPU Operator: operator",
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0": "GPU Operator: devicePlugin",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless": "GPU Operator: dcgmExporter",
        "registry.k8s.io/nfd/node-feature-discovery:v0.19.0": (
            "GPU Operator: node-feature-discovery (dependency 0.19.0, values not in the archive)"
        ),
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04": "gpuforge validate (cluster probe)",
        "registry.k8s.io/pause:3.10": "gpuforge validate (cluster probe)",
    }
    assert all(digest.startswith("tag only") for _, _, digest in listed)
    assert "kubeadm config images list --kubernetes-version v1.31.4" in (out / "images.txt").read_text()

    sources = f"  mode: offline\n  bundle_dir: {out}\n  bundle_fingerprint: {pin}" + artifact_pins(ADDON_FILES)
    offline = write(tmp_path, "offline.yaml", sources)
    spec = load_spec(offline)
    kcp1 = next(n for n in resolve_nodes(spec) if n.name == "kcp1")
    repo_on_node = pkgs.kubernetes_repo(spec, kcp1.os)
    assert repo_on_node.bundle == str(out / "apt" / "kubernetes")
    assert [a.name for a in arts.addon_artifacts(spec)] == list(ADDON_FILES)
    assert all(a.local is not None and a.sha256 for a in arts.addon_artifacts(spec))  # manifest-checked


def test_rhel_kubernetes_needs_point_at_the_rpm_repository(tmp_path: Path) -> None:
    """RHEL nodes: the bundle fetches pkgs.k8s.io's rpm repository of the minor (key repomd.xml.key,
    packages signed: install-kubeadm's repo file has gpgcheck=1) at the pinned patch."""
    from gpuforge.bundle.downloads import spec_needs
    from gpuforge.bundle.resolve import Want

    spec_file = write(tmp_path, "rhel.yaml", "  mode: upstream")
    spec_file.write_text(spec_file.read_text().replace("os: ubuntu24.04", "os: rhel9"))
    needs = spec_needs(load_spec(spec_file))
    (k8s,) = [n for n in needs.repos.values() if n.kind == "kubernetes"]
    assert (k8s.fmt, k8s.url) == ("rpm", "https://pkgs.k8s.io/core:/stable:/v1.31/rpm")
    assert k8s.key_url == "https://pkgs.k8s.io/core:/stable:/v1.31/rpm/repodata/repomd.xml.key"
    assert sorted(k8s.nodes) == ["kcp1", "kgpu1"]
    assert k8s.wants["kubeadm"] == Want("kubeadm", ("1.31.4-*",), "Kubernetes 1.31.4")

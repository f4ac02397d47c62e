"""The kubernetes layer: node prerequisites from the kernel's and the files' state (facts in, commands out),
and the whole plan of fresh Kubernetes nodes (simulated, golden)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts
from gpuforge.deploy.layers.kubernetes import (
    BRIDGE_NF,
    FSTAB,
    FSTAB_SWAP_OFF,
    PROC_FILESYSTEMS,
    PROC_SWAPS,
    kubernetes_layer,
    sysctl_path,
)
from gpuforge.orchestrate.plan import plan
from gpuforge.probes.swap import active_swaps, fstab_swap_lines
from gpuforge.render.kubernetes import GPU_OPERATOR_VALUES, K8S_SYSCTL, KUEUE_MANIFESTS, MODULES_LOAD
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.load import parse_spec
from gpuforge.spec.roles import deploys_for
from tests import yaml_text
from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, assert_golden_plan, simulated, write_simulated_spec

K8S = REPO / "inventories" / "k8s-gpu-operator.yaml"
GOLDEN = Path(__file__).parent / "fixtures" / "plan_fresh_k8s"
SWAPS_ON = "Filename\tType\tSize\tUsed\tPriority\n/swap.img                               file\t\t2097148\t0\t-2\n"
SWAPS_OFF = "Filename\tType\tSize\tUsed\tPriority\n"
FSTAB_WITH_SWAP = """\
# /etc/fstab: static file system information.
UUID=1b2c / ext4 errors=remount-ro 0 1
/swap.img\tnone\tswap\tsw\t0\t0
# /dev/sdb1 none swap sw 0 0
UUID=77aa none  swap defaults,pri=5 0 0
tmpfs /tmp tmpfs defaults 0 0
"""
KERNEL_READY = {
    PROC_FILESYSTEMS: "nodev\tsysfs\nnodev\toverlay\n\text4\n",
    BRIDGE_NF: "1\n",
    sysctl_path("net.bridge.bridge-nf-call-iptables"): "1\n",
    sysctl_path("net.bridge.bridge-nf-call-ip6tables"): "1\n",
    sysctl_path("net.ipv4.ip_forward"): "1\n",
}


def node(name: str, mutate: Any = None) -> tuple[Any, Any]:
    data = yaml.safe_load(K8S.read_text())
    if mutate:
        mutate(data)
    spec = parse_spec(yaml_text.dump(data), "k8s.yaml", base_dir=K8S.parent)
    return spec, next(n for n in resolve_nodes(spec) if n.name == name)


PREREQUISITES = frozenset({"modules", "sysctl", "swap"})


def steps(layer: Any, contents: dict[str, str | None]) -> list[tuple[str, str | None]]:
    """The node-prerequisite steps (packages: tests/converge/test_kubernetes_packages.py)."""
    out = layer.after(LayerFacts(contents=dict(contents)), set())
    return [(s.kind.value, s.command) for s in out if s.kind.value in PREREQUISITES]


def test_every_kubernetes_node_runs_the_container_engine_and_this_layer() -> None:
    spec = load_spec(K8S)
    for n in resolve_nodes(spec):
        assert {"nvidia", "kubernetes"} <= set(deploys_for(n)), n.name  # control plane included
        assert deploys_for(n).index("nvidia") < deploys_for(n).index("kubernetes")


def test_a_fresh_node_loads_the_modules_and_sets_the_sysctls() -> None:
    spec, kcp2 = node("kcp2")
    layer = kubernetes_layer(spec, kcp2)
    assert [f.path for f in layer.files] == [MODULES_LOAD, K8S_SYSCTL]  # no manifests off the first plane
    assert steps(layer, {PROC_SWAPS: SWAPS_OFF, FSTAB: ""}) == [
        ("modules", "modprobe -a overlay br_netfilter"),
        ("sysctl", f"sysctl -q -p {K8S_SYSCTL}"),
    ]


def test_a_ready_node_gets_no_step() -> None:
    spec, kgpu = node("kgpu01")
    assert (
        steps(kubernetes_layer(spec, kgpu), {**KERNEL_READY, PROC_SWAPS: SWAPS_OFF, FSTAB: "UUID=1 / ext4 0 1\n"}) == []
    )


def test_only_what_differs_is_done() -> None:
    spec, kgpu = node("kgpu01")
    layer = kubernetes_layer(spec, kgpu)
    forwarding_off = {**KERNEL_READY, sysctl_path("net.ipv4.ip_forward"): "0\n", PROC_SWAPS: SWAPS_OFF}
    assert steps(layer, forwarding_off) == [("sysctl", f"sysctl -q -p {K8S_SYSCTL}")]
    no_bridge = {k: v for k, v in KERNEL_READY.items() if k != BRIDGE_NF}
    assert [k for k, _ in steps(layer, {**no_bridge, PROC_SWAPS: SWAPS_OFF})] == ["modules", "sysctl"]
    assert layer.after(LayerFacts(contents=no_bridge), set())[0].summary.startswith("load br_netfilter ")


def test_swap_is_turned_off_and_kept_off() -> None:
    spec, kgpu = node("kgpu01")
    got = steps(kubernetes_layer(spec, kgpu), {**KERNEL_READY, PROC_SWAPS: SWAPS_ON, FSTAB: FSTAB_WITH_SWAP})
    assert got == [("swap", "swapoff -a"), ("swap", FSTAB_SWAP_OFF)]


def test_the_fstab_edit_comments_out_exactly_the_swap_entries(tmp_path: Path) -> None:
    """The real sed on a copy: what the parser calls swap is commented out; nothing else changes."""
    sed = shutil.which("sed")
    assert sed
    fstab = tmp_path / "fstab"
    fstab.write_text(FSTAB_WITH_SWAP)
    cmd = FSTAB_SWAP_OFF.replace(" /etc/fstab", f" {fstab}")
    assert subprocess.run(["sh", "-c", cmd], check=False).returncode == 0
    after = fstab.read_text()
    assert fstab_swap_lines(after) == []
    before_lines, after_lines = FSTAB_WITH_SWAP.splitlines(), after.splitlines()
    assert len(before_lines) == len(after_lines)
    swap = set(fstab_swap_lines(FSTAB_WITH_SWAP))
    for old, new in zip(before_lines, after_lines, strict=True):
        assert new == (f"# gpuforge: swap off for kubelet: {old}" if old in swap else old)
    assert subprocess.run(["sh", "-c", cmd], check=False).returncode == 0  # idempotent
    assert fstab.read_text() == after


def test_swap_parsers() -> None:
    assert active_swaps(SWAPS_ON) == ["/swap.img"] and active_swaps(SWAPS_OFF) == [] and active_swaps("") == []
    assert fstab_swap_lines(FSTAB_WITH_SWAP) == [
        "/swap.img\tnone\tswap\tsw\t0\t0",
        "UUID=77aa none  swap defaults,pri=5 0 0",
    ]


def test_kernel_setup_off_leaves_the_kernel_alone() -> None:
    """Containers share their host's kernel (the lab): no module, no sysctl; swap is still checked."""

    def off(d: dict[str, Any]) -> None:
        d.setdefault("kubernetes", {})["kernel_setup"] = False

    spec, kcp1 = node("kcp1", off)
    layer = kubernetes_layer(spec, kcp1)
    assert MODULES_LOAD not in {f.path for f in layer.files} and K8S_SYSCTL not in {f.path for f in layer.files}
    assert {GPU_OPERATOR_VALUES, KUEUE_MANIFESTS} <= {f.path for f in layer.files}  # first control plane
    assert steps(layer, {PROC_SWAPS: SWAPS_ON, FSTAB: ""}) == [("swap", "swapoff -a")]
    assert PROC_FILESYSTEMS not in layer.read_paths


def test_a_slurm_node_has_no_kubernetes_layer() -> None:
    spec = load_spec(REPO / "inventories" / "slurm-h100.yaml")
    for n in resolve_nodes(spec):
        assert kubernetes_layer(spec, n).is_empty and "kubernetes" not in deploys_for(n)


@pytest.fixture
def k8s_spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example cluster, with the sha256 of the release files no upstream publishes one for pinned
    (made up: nothing is downloaded); flannel and helm are in gpuforge's cited table."""
    data = yaml.safe_load(K8S.read_text())
    data.setdefault("sources", {})["artifact_sha256"] = {
        name: hashlib.sha256(f"simulated release file {name}".encode()).hexdigest()
        for name in (
            "gpu-operator-v26.7.0.tgz",
            "kueue-v0.19.2-manifests.yaml",
            "kuberay-operator-1.7.0.tgz",
            "kubeflow-trainer-2.3.0.tgz",
        )
    }
    path = write_simulated_spec(data, tmp_path, "kgpu.yaml")
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return path


@pytest.mark.parametrize("name", ["kcp1", "kcp2", "kgpu01"])
def test_plan_of_a_fresh_kubernetes_node_is_the_golden_one(
    k8s_spec_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str
) -> None:
    cluster: SimulatedCluster = simulated(monkeypatch, tmp_path)
    got = assert_golden_plan(plan(load_cluster(k8s_spec_file), limit=name), name, GOLDEN)
    k8s = [op for op in got["operations"] if op["layer"] == "kubernetes"]
    assert k8s, "no kubernetes layer in the plan"
    kinds = [s["kind"] for op in k8s for s in op["steps"]]
    assert {"modules", "sysctl"} <= set(kinds)
    (engine,) = [op for op in got["operations"] if op["layer"] == "container-engine"]
    assert ["install", "install containerd"] in [[s["kind"], s["summary"]] for s in engine["steps"]]
    assert cluster.uploads.get(name, []) == []  # a plan changes nothing


def test_a_whole_cluster_plan_creates_one_token_for_the_joining_nodes(
    k8s_spec_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Through pyinfra itself: every node's kubernetes layer runs before the first control plane's
    token operation (operations run one at a time across hosts), so the token is planned there,
    for the nodes that still join, and each of those plans its join."""
    simulated(monkeypatch, tmp_path)
    result = plan(load_cluster(k8s_spec_file))
    assert result.ok, result.errors
    hosts = result.as_dict()["hosts"]
    token = [op for op in hosts["kcp1"]["operations"] if op["layer"] == "kubernetes-join-token"]
    assert len(token) == 1
    summary = token[0]["steps"][0]["summary"]
    joining = sorted(n for n in hosts if n != "kcp1")
    assert summary == f"write a 30-minute bootstrap token for {', '.join(joining)} (secret)"
    for name in joining:
        joins = [op for op in hosts[name]["operations"] if op["layer"] == "kubernetes-join"]
        assert len(joins) == 1, name
        assert [s["kind"] for s in joins[0]["steps"] if s["summary"].startswith("kubeadm join")] == ["install"], name
    assert not [op for op in hosts["kcp1"]["operations"] if op["layer"] == "kubernetes-join"]

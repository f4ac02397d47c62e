"""The Network Operator's add-ons: where they sit among the others, what they need, and their commands
run through a real ``sh`` against stand-in helm and kubectl (``stub.py``): the checked chart, the
namespace, helm, then the NicClusterPolicy's server-side apply and the bounded wait for its state."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.converge import LayerFacts
from gpuforge.deploy.layers.k8s_addon import sha16
from gpuforge.deploy.layers.k8s_addons import STAMP_DIR, addons, addons_layer
from gpuforge.deploy.layers.k8s_network_operator import POLL_S
from gpuforge.render import k8s_network_operator as render
from gpuforge.spec import resolve_nodes
from tests.converge.test_k8s_frameworks import archive
from tests.network_operator.conftest import CHART, data, operator, spec_of
from tests.network_operator.stub import Node

CHART_BLOB = archive("network-operator", {"Chart.yaml": "name: network-operator\nversion: 26.4.1\n"})


def pinned(**change: Any) -> Any:
    d = data()
    d.setdefault("sources", {})["artifact_sha256"] = {CHART: hashlib.sha256(CHART_BLOB).hexdigest()}
    operator(d).update(change)
    return spec_of(d)


def by_name(spec: Any) -> dict[str, Any]:
    return {a.name: a for a in addons(spec)}


def test_after_the_gpu_operator_and_before_its_driver_wait_and_the_frameworks() -> None:
    names = [a.name for a in addons(pinned())]
    at = names.index("gpu-operator")
    assert names[at : at + 3] == ["gpu-operator", "network-operator", "nic-cluster-policy"]
    d = data()
    d["kubernetes"]["gpu_operator"]["driver"] = "operator"
    names = [a.name for a in addons(spec_of(d))]
    assert names.index("nic-cluster-policy") < names.index("gpu-driver-upgrade")  # MOFED before the driver pods
    assert "network-operator" not in by_name(pinned(enabled=False))


def test_an_unpinned_chart_is_reported_with_the_pin_to_write_and_stops_the_later_add_ons() -> None:
    a = by_name(spec_of(data()))["network-operator"]
    assert a.command is None and f"sources.artifact_sha256: {{{CHART}: <64 hex digits>}}" in (a.reason or "")
    spec = spec_of(data())
    kcp1 = next(n for n in resolve_nodes(spec) if n.name == "kcp1")
    layer = addons_layer(spec, kcp1)
    assert layer.after is not None
    steps = list(layer.after(LayerFacts(contents={}), set()))
    # the example pins no chart at all: the GPU Operator's is the first unavailable one
    assert steps[-1].summary.startswith("GPU Operator") and "unavailable" in steps[-1].kind.value


def test_the_policy_is_applied_again_when_the_chart_or_the_policy_changes() -> None:
    items = by_name(pinned())
    assert items["nic-cluster-policy"].digest.endswith(f"operator:{sha16(items['network-operator'].digest)}")
    assert by_name(pinned(resource_name="ib"))["nic-cluster-policy"].digest != items["nic-cluster-policy"].digest
    assert by_name(pinned(rdma_hca_max=8))["network-operator"].digest == items["network-operator"].digest


# --------------------------------------------------------------------------- through a real shell


@pytest.fixture
def node(tmp_path: Path) -> Node:
    spec = pinned(wait_minutes=1)
    files = {f.path: f.data for f in render.network_operator_files(spec)}
    n = Node(tmp_path, {CHART: CHART_BLOB}, files)
    n.spec = spec  # type: ignore[attr-defined]
    return n


def full(a: Any) -> str:
    return f"{a.command} && {a.stamp_command()}"


def test_the_chart_is_checked_then_the_namespace_is_labelled_then_helm(node: Node) -> None:
    cp = node.run(full(by_name(node.spec)["network-operator"]))  # type: ignore[attr-defined]
    assert cp.returncode == 0, cp.stderr
    assert [" ".join(c.split()[:3]) for c in node.calls()] == [
        "helm pull network-operator",
        "kubectl get namespace",
        "kubectl create namespace",
        "kubectl label --overwrite",
        "helm upgrade --install",
        "helm history network-operator",
    ]
    assert node.read()["namespaces"]["nvidia-network-operator"] == {"pod-security.kubernetes.io/enforce": "privileged"}
    upgrade = next(c for c in node.calls() if c.startswith("helm upgrade"))
    assert "--version 26.4.1" in upgrade and "--namespace nvidia-network-operator" in upgrade
    assert "network-operator-values.yaml --wait --timeout 15m" in upgrade
    stamp = node.root / "var" / "k8s" / "network-operator.applied"
    assert stamp.read_text().strip().endswith("revision:4")
    cp = node.run(full(by_name(node.spec)["network-operator"]))  # type: ignore[attr-defined]
    assert cp.returncode == 0 and sum(c.startswith("kubectl create") for c in node.calls()) == 1  # once


def test_a_changed_chart_is_never_installed(node: Node) -> None:
    (node.charts / CHART).write_bytes(b"not the pinned archive")
    cp = node.run(full(by_name(node.spec)["network-operator"]))  # type: ignore[attr-defined]
    assert cp.returncode != 0 and "is not the file of sha256" in cp.stderr
    assert not any(c.startswith(("helm upgrade", "kubectl")) for c in node.calls())


def policy(node: Node) -> Any:
    return by_name(node.spec)["nic-cluster-policy"]  # type: ignore[attr-defined]


def test_the_policy_is_applied_server_side_and_the_wait_ends_when_it_is_ready(node: Node) -> None:
    node.policy_reads(None, ("notReady", ""), ("notReady", ""), ("ready", ""))
    cp = node.run(full(policy(node)))
    assert cp.returncode == 0, cp.stderr
    assert "gpuforge: nic-cluster-policy is ready" in cp.stdout
    [(path, server_side, text)] = node.read()["applied"]
    assert server_side and Path(path).name == "nic-cluster-policy.yaml" and "rdma_shared_device_a" in text
    reads = [c for c in node.calls() if c.startswith("kubectl get nicclusterpolicies")]
    assert len(reads) == 4  # not found, notReady twice, ready
    assert (node.root / "var" / "k8s" / "nic-cluster-policy.applied").is_file()


def test_the_wait_is_bounded_and_reports_the_last_state_and_reason(node: Node) -> None:
    node.policy_reads(("notReady", ""), ("error", "ofed driver: image pull failed"))
    cp = node.run(full(policy(node)))
    assert cp.returncode == 1
    assert "nic-cluster-policy is not ready after 1 minutes (state: error, reason: ofed driver: image pull failed)" in (
        cp.stderr
    )
    reads = [c for c in node.calls() if "{.status.state}" in c]
    assert len(reads) == 60 // POLL_S
    assert not (node.root / "var" / "k8s" / "nic-cluster-policy.applied").exists()


def test_a_policy_never_created_is_reported_as_none(node: Node) -> None:
    node.policy_reads(None)
    cp = node.run(full(policy(node)))
    assert cp.returncode == 1 and "(state: none)" in cp.stderr


def test_the_stamps_live_in_the_stamp_dir() -> None:
    assert all(a.stamp.startswith(f"{STAMP_DIR}/") for a in addons(pinned()))

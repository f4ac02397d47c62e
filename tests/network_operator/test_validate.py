"""The cluster check ``scheduler.k8s_rdma_allocatable``: each Kubernetes node of a group with a fabric
offers ``rdma/<resource_name>``, judged from ``kubectl get nodes -o json`` (a recorded node of
tests/validator/fixtures/kubectl/ with its allocatable set here: no recording of a node with the RDMA
shared device plugin exists in this repository)."""

from __future__ import annotations

from typing import Any

from gpuforge.spec import resolve_nodes
from gpuforge.validator import cluster_network_operator as check
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS
from gpuforge.validator.registry import BY_ID
from tests.helpers import inventory
from tests.network_operator.conftest import data, operator, spec_of
from tests.validator.test_k8s_checks import data_for, node_as, worker

GPU = {"cpu": "112", "memory": "2000000Mi", "nvidia.com/gpu": "8", "pods": "110"}


def judged(spec: Any, allocatable: dict[str, str] | None, name: str = "kgpu01") -> tuple[str, str]:
    nodes = node_as(name, "nodes-a16-vgpu-rke2.json", allocatable=allocatable)
    d, _ = data_for(spec, nodes=nodes)
    return check.rdma_allocatable(d, worker(d, name))


def test_registered_as_a_kubernetes_check_after_node_readiness() -> None:
    c = BY_ID[check.CHECK]
    assert c.depends_on == ("scheduler.k8s_node_ready",) and c.id.startswith("scheduler.k8s_")  # kube_query runs


def test_a_node_offering_the_resource_passes() -> None:
    assert judged(spec_of(data()), {**GPU, "rdma/rdma_shared_device_a": "63"}) == (
        PASS, "63 rdma/rdma_shared_device_a allocatable")  # fmt: skip


def test_a_node_without_it_fails_naming_what_it_offers() -> None:
    outcome, text = judged(spec_of(data()), GPU)
    assert outcome == FAIL and text.startswith("no rdma/rdma_shared_device_a allocatable on kgpu01 (")
    d = data()
    operator(d)["resource_name"] = "ib_fabric"
    outcome, text = judged(spec_of(d), {**GPU, "rdma/rdma_shared_device_a": "63", "rdma/other": "0"})
    assert outcome == FAIL and "it offers rdma/other, rdma/rdma_shared_device_a" in text
    assert judged(spec_of(data()), {**GPU, "rdma/rdma_shared_device_a": "0"})[0] == FAIL


def test_blocked_when_the_api_server_cannot_be_asked() -> None:
    spec = spec_of(data())
    d, _ = data_for(spec)
    d.kube_error = "kubectl get nodes on kcp1: connection refused"
    assert check.rdma_allocatable(d, worker(d, "kgpu01"))[0] == BLOCKED


def test_skipped_with_a_reason_where_it_does_not_apply() -> None:
    spec = spec_of(data())
    nodes = {n.name: n for n in data_for(spec)[0].nodes}
    assert check.gate_rdma_node(spec, nodes["kgpu01"]) is None
    assert check.gate_rdma_node(spec, nodes["kmon1"]) == "the node's group declares no fabric"
    off = data()
    operator(off)["enabled"] = False
    assert check.gate_rdma_node(spec_of(off), nodes["kgpu01"]) == (
        "the Network Operator is off (kubernetes.network_operator.enabled)")  # fmt: skip
    slurm = inventory("slurm-h100")
    some = resolve_nodes(slurm)[0]
    assert check.gate_rdma_node(slurm, some) == "not a Kubernetes cluster"

"""The Network Operator's cluster check: each Kubernetes node of a group with a fabric offers the RDMA
shared device plugin's resource (``rdma/<resource_name>`` in ``status.allocatable``), read from the
same ``kubectl get nodes -o json`` as the other Kubernetes checks (``cluster_k8s.kube_query``).
Skipped, saying why, off Kubernetes, on a node of a group without a fabric, and with the operator off.
"""

from __future__ import annotations

from gpuforge.spec import Spec
from gpuforge.spec.fabric_rules import fabric_of
from gpuforge.spec.network_operator import rdma_resource
from gpuforge.spec.network_operator_rules import network_operator_on
from gpuforge.spec.nodes import Node
from gpuforge.validator.cluster import ClusterData, cluster_check
from gpuforge.validator.cluster_k8s import gate_k8s_node
from gpuforge.validator.node.base import BLOCKED, CRITICAL, FAIL, PASS, Outcome

CHECK = "scheduler.k8s_rdma_allocatable"


def gate_rdma_node(spec: Spec, node: Node) -> str | None:
    reason = gate_k8s_node(spec, node)
    if reason:
        return reason
    if fabric_of(spec, node) is None:
        return "the node's group declares no fabric"
    if not network_operator_on(spec):
        return "the Network Operator is off (kubernetes.network_operator.enabled)"
    return None


def _count(value: object) -> int:
    """An extended resource's quantity (a plain integer for device plugin resources); 0 when unreadable."""
    try:
        return int(str(value))
    except ValueError:
        return 0


@cluster_check(
    CHECK,
    "scheduler",
    CRITICAL,
    "The node offers the RDMA shared device plugin's resource rdma/<resource_name> (Network Operator)",
    depends_on=("scheduler.k8s_node_ready",),
    gate=gate_rdma_node,
)
def rdma_allocatable(data: ClusterData, node: Node) -> Outcome:
    if data.kube_error:
        return BLOCKED, f"cannot ask the API server: {data.kube_error}"
    k = data.spec.kubernetes
    assert k is not None  # the gate
    resource = rdma_resource(k.network_operator.resource_name)
    allocatable = (data.kube_nodes.get(node.name) or {}).get("status", {}).get("allocatable", {})
    n = _count(allocatable.get(resource, 0))
    if n > 0:
        return PASS, f"{n} {resource} allocatable"
    others = sorted(r for r in allocatable if r.startswith("rdma/"))
    seen = f"; it offers {', '.join(others)}" if others else ""
    return FAIL, (
        f"no {resource} allocatable on {node.name}{seen} (the NicClusterPolicy's device plugin not running there, "
        "or its selectors match none of the node's HCAs)"
    )

"""What the Kubernetes renderers share: the spec's section, where the cluster manifests live on the
first control plane, and which nodes offer GPUs (pure functions, spec in)."""

from __future__ import annotations

from gpuforge.spec.model import Kubernetes, Role, Spec
from gpuforge.spec.nodes import nodes_with

MANIFEST_DIR = "/etc/gpuforge/k8s"
GPU_RESOURCE = "nvidia.com/gpu"


def kubernetes_section(spec: Spec) -> Kubernetes:
    if spec.kubernetes is None:
        raise ValueError("spec has no kubernetes section")
    return spec.kubernetes


def gpu_operator_needed(spec: Spec) -> bool:
    """Some k8s-worker has GPUs."""
    return any(n.hardware.gpu is not None for n in nodes_with(spec, Role.K8S_WORKER))


def k8s_worker_gpus(spec: Spec) -> int:
    """GPUs on all k8s-worker nodes together."""
    return sum(n.hardware.gpu_count for n in nodes_with(spec, Role.K8S_WORKER))

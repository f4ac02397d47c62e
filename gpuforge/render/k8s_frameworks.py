"""The training and serving frameworks' files on the first control plane: the KubeRay and Kubeflow
Trainer charts' values, and example workloads admitted through a tenant's Kueue queue.

Facts are :mod:`gpuforge.spec.k8s_frameworks` (each cited there). Invariants:

* Every values key path exists in the chart's own ``values.yaml`` with a value of the same kind
  (checked by the tests against the charts of the pinned releases).
* An example (a RayCluster with a GPU worker group, a TrainJob of the ``torch-distributed``
  runtime) is rendered only where it can be admitted: Kueue with tenants, and a k8s-worker group
  with whole GPUs. It lives in the first tenant's namespace and names its LocalQueue (the
  ``kueue.x-k8s.io/queue-name`` label); its GPU pods fit that tenant's nominal quota of the
  group's flavor. gpuforge renders the examples and never applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.render.files import RenderedFile, header
from gpuforge.render.k8s_common import GPU_RESOURCE, MANIFEST_DIR, kubernetes_section
from gpuforge.render.k8s_queues import KUEUE_LOCAL_QUEUE, flavor_quotas, flavors
from gpuforge.render.nvidia import dump_yaml, dump_yaml_all
from gpuforge.spec import k8s_frameworks as fw
from gpuforge.spec.model import Role, Spec, Tenant
from gpuforge.spec.nodes import Node, nodes_with

KUBERAY_VALUES = f"{MANIFEST_DIR}/kuberay-values.yaml"
TRAINER_VALUES = f"{MANIFEST_DIR}/trainer-values.yaml"
EXAMPLES_DIR = f"{MANIFEST_DIR}/examples"
RAYCLUSTER_EXAMPLE = f"{EXAMPLES_DIR}/raycluster-gpu.yaml"
TRAINJOB_EXAMPLE = f"{EXAMPLES_DIR}/trainjob-pytorch.yaml"
#: The head pod of the example RayCluster (integer CPUs, requests equal to limits: kuberay-sample).
RAY_HEAD_RESOURCES = {"cpu": "2", "memory": "8Gi"}


def kuberay_values(spec: Spec) -> dict[str, Any]:
    """Overrides of the kuberay-operator chart's values (k8s_frameworks 'kuberay-chart'): the operator
    watches every namespace (the tenants'); with Volcano as the batch queue, RayClusters are gang
    scheduled by it (``batchScheduler.name: volcano``); Kueue needs no scheduler of its own."""
    volcano = kubernetes_section(spec).batch_queue.kind == "volcano"
    return {
        "singleNamespaceInstall": False,
        "batchScheduler": {"enabled": False, "name": "volcano" if volcano else ""},
        "metrics": {"serviceMonitor": {"enabled": False}},
    }


def trainer_values(spec: Spec) -> dict[str, Any]:
    """Overrides of the kubeflow-trainer chart's values (k8s_frameworks 'trainer-install'): JobSet with
    it (TrainJobs run as JobSets), the CRDs from the chart, and the ``torch-distributed`` runtime."""
    del spec  # the same for every spec
    return {
        "crds": {"enabled": True},
        "jobset": {"install": True},
        "runtimes": {"torchDistributed": {"enabled": True}},
    }


@dataclass(frozen=True)
class GpuWorkers:
    """Where the examples' GPU pods go: one node of the group (its shape), how many pods, GPUs each."""

    tenant: Tenant
    node: Node
    replicas: int
    gpus: int

    @property
    def requests(self) -> dict[str, str]:
        """Half the node's CPUs and memory (room for the node's own pods), and its GPUs."""
        hw = self.node.hardware
        return {
            "cpu": str(max(1, hw.cpus // 2)),
            "memory": f"{max(1, hw.real_memory_mb // 1024 // 2)}Gi",
            GPU_RESOURCE: str(self.gpus),
        }


def gpu_workers(spec: Spec) -> GpuWorkers | None:
    """The first k8s-worker group offering whole GPUs, sized to the first tenant's quota of its flavor
    (up to two pods of the node's GPUs); None without Kueue tenants or whole GPUs."""
    bq = kubernetes_section(spec).batch_queue
    if bq.kind != "kueue" or not bq.tenants:
        return None
    tenant = bq.tenants[0]
    workers = nodes_with(spec, Role.K8S_WORKER)
    for flavor, quota in zip(flavors(spec), flavor_quotas(spec, tenant), strict=True):
        members = [n for n in workers if n.group == flavor.group]
        if not flavor.capacity[GPU_RESOURCE] or not members or not quota[GPU_RESOURCE]:
            continue
        node = members[0]
        per_node = flavor.capacity[GPU_RESOURCE] // len(members)
        gpus = min(per_node, quota[GPU_RESOURCE])
        replicas = max(1, min(2, len(members), quota[GPU_RESOURCE] // gpus))
        return GpuWorkers(tenant, node, replicas, gpus)
    return None


def _queue_metadata(name: str, w: GpuWorkers) -> dict[str, Any]:
    return {"name": name, "namespace": w.tenant.namespace, "labels": {fw.QUEUE_NAME_LABEL: KUEUE_LOCAL_QUEUE}}


def raycluster_example(spec: Spec) -> dict[str, Any] | None:
    """A RayCluster whose GPU worker group Kueue admits through the first tenant's queue
    (k8s_frameworks 'kueue-raycluster', 'kuberay-sample', 'ray-image-tags')."""
    w = gpu_workers(spec)
    if w is None:
        return None
    head_ports = [{"containerPort": port, "name": name} for name, port in fw.RAY_HEAD_PORTS]
    head = {"name": "ray-head", "image": fw.RAY_IMAGE, "ports": head_ports,
            "resources": {"requests": dict(RAY_HEAD_RESOURCES), "limits": dict(RAY_HEAD_RESOURCES)}}  # fmt: skip
    worker = {"name": "ray-worker", "image": fw.RAY_GPU_IMAGE,
              "resources": {"requests": w.requests, "limits": w.requests}}  # fmt: skip
    return {
        "apiVersion": fw.RAY_API,
        "kind": "RayCluster",
        "metadata": _queue_metadata("raycluster-gpu", w),
        "spec": {
            "rayVersion": fw.RAY_VERSION,
            "headGroupSpec": {
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {"spec": {"containers": [head]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": w.replicas,
                    "minReplicas": w.replicas,
                    "maxReplicas": w.replicas,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
        },
    }


def trainjob_example(spec: Spec) -> dict[str, Any] | None:
    """A TrainJob of the chart's ``torch-distributed`` runtime that Kueue admits as a whole through the
    first tenant's queue (k8s_frameworks 'kueue-trainjob', 'trainer-torch-runtime', 'kueue-workload')."""
    w = gpu_workers(spec)
    if w is None:
        return None
    return {
        "apiVersion": fw.TRAINER_API,
        "kind": "TrainJob",
        "metadata": _queue_metadata("pytorch-gpu", w),
        "spec": {
            "runtimeRef": {"name": fw.TORCH_RUNTIME, "kind": "ClusterTrainingRuntime", "apiGroup": fw.TRAINER_GROUP},
            "trainer": {
                "numNodes": w.replicas,
                "command": ["python3", "-c", "import torch; print(torch.cuda.device_count(), 'GPUs')"],
                "resourcesPerNode": {"requests": w.requests, "limits": {GPU_RESOURCE: w.requests[GPU_RESOURCE]}},
            },
        },
    }


def _example(path: str, doc: dict[str, Any] | None, how: str) -> list[RenderedFile]:
    if doc is None:
        return []
    note = f"# An example, not applied by gpuforge: {how}\n"
    return [RenderedFile(path, header() + note + dump_yaml_all([doc]))]


def framework_files(spec: Spec) -> list[RenderedFile]:
    """The enabled frameworks' values files and examples (first control plane)."""
    f = kubernetes_section(spec).frameworks
    files: list[RenderedFile] = []
    if f.kuberay.enabled:
        files.append(RenderedFile(KUBERAY_VALUES, header() + dump_yaml(kuberay_values(spec))))
        files += _example(RAYCLUSTER_EXAMPLE, raycluster_example(spec), f"kubectl apply -f {RAYCLUSTER_EXAMPLE}")
    if f.trainer.enabled:
        files.append(RenderedFile(TRAINER_VALUES, header() + dump_yaml(trainer_values(spec))))
        files += _example(TRAINJOB_EXAMPLE, trainjob_example(spec), f"kubectl apply -f {TRAINJOB_EXAMPLE}")
    return files

"""Batch-queue manifests: Kueue (a ResourceFlavor per k8s-worker group, a ClusterQueue per tenant, its
LocalQueue, Kueue's own configuration) and Volcano (a Queue per tenant, the scheduler configuration).

Invariants (facts: ``gpuforge.spec.k8s_frameworks`` 'kueue-flavors', ``k8s_day2`` 'kueue-config'):

* Every k8s-worker group is one ResourceFlavor, named as the group's Kubernetes name, whose
  ``nodeLabels`` select the group's nodes (``gpuforge.dev/node-group``, set by the node-labels
  add-on); its capacity is what the group's nodes offer (cpu, memory, whole GPUs, MIG devices).
* Each ClusterQueue has one resource group covering every resource, with every flavor listing every
  covered resource in the same order (the CRD's rule); flavors without GPUs come first, so work
  that needs no GPU lands on nodes without GPUs before it takes a GPU node's CPUs.
* A quota the spec gives (``gpu_quota``, ``cpu_quota``, ``memory_quota_gi``, ``mig_quota``,
  ``borrowing_limit``) is split over the flavors in proportion to what each offers, summing to
  exactly the spec's number; a quota it leaves out is the tenant's share of each flavor (the share
  its GPU quota has of the workers' GPUs, or an equal share), rounded down per flavor. Volcano,
  which has no flavors, gets the share of the whole (``tenant_quota``), rounded down once.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from gpuforge.render.files import RenderedFile, header
from gpuforge.render.k8s_common import (
    GPU_RESOURCE,
    MANIFEST_DIR,
    gpu_operator_needed,
    k8s_worker_gpus,
    kubernetes_section,
)
from gpuforge.render.nvidia import LiteralStr, dump_yaml, dump_yaml_all
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec import k8s_frameworks as fw
from gpuforge.spec.mig import mig_layout
from gpuforge.spec.model import MigStrategy, Role, Spec, Tenant
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.types import k8s_name, mig_resource

KUEUE_MANIFESTS = f"{MANIFEST_DIR}/kueue.yaml"
VOLCANO_MANIFESTS = f"{MANIFEST_DIR}/volcano.yaml"
KUEUE_CONFIG = f"{MANIFEST_DIR}/kueue-config.yaml"
KUEUE_LOCAL_QUEUE = "default"
# Kueue serves and stores v1beta2 from v0.16.0 on (v1beta1 before).
KUEUE_V1BETA2_SINCE = (0, 16)
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
#: The scheduler configuration the capacity plugin needs (volcano-sh/volcano
#: docs/user-guide/how_to_use_capacity_plugin.md: "reclaim action is enabled", "capacity plugin is
#: enabled and proportion plugin is removed"; "capacity and proportion plugin are in conflict").
VOLCANO_SCHEDULER_CONFIGMAP = ("volcano-system", "volcano-scheduler-configmap", "volcano-scheduler.conf")
VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill, reclaim"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: capacity
  - name: nodeorder
  - name: binpack
"""


# --------------------------------------------------------------------------- capacity and flavors


@dataclass(frozen=True)
class Flavor:
    """One k8s-worker group as a Kueue ResourceFlavor: its name (the group's Kubernetes name, also the
    value of its nodes' ``gpuforge.dev/node-group`` label) and what its nodes offer together."""

    name: str
    group: str
    capacity: dict[str, int]


def node_capacity(spec: Spec, node: Node) -> dict[str, int]:
    """What one k8s worker offers: ``cpu``, ``memory`` (GiB) and its GPUs as the operator's MIG strategy
    offers them (``none``: every GPU; ``single``: whole GPUs and MIG devices alike as ``nvidia.com/gpu``;
    ``mixed``: whole GPUs, and each profile's devices as ``nvidia.com/mig-<profile>``). ``gpus`` counts
    the physical GPUs."""
    strategy = kubernetes_section(spec).gpu_operator.mig_strategy
    out: dict[str, int] = {
        "cpu": node.hardware.cpus,
        "memory": node.hardware.real_memory_mb // 1024,
        GPU_RESOURCE: 0,
        "gpus": node.hardware.gpu_count,
    }
    gpu = node.hardware.gpu
    if gpu is None or not node.mig_config or strategy is MigStrategy.NONE:
        out[GPU_RESOURCE] = node.hardware.gpu_count
        return out
    layout = mig_layout(spec.mig.configs.get(node.mig_config, []), gpu.count)
    out[GPU_RESOURCE] = layout.full_gpus
    for profile, count in sorted(layout.devices.items()):
        key = GPU_RESOURCE if strategy is MigStrategy.SINGLE else mig_resource(profile)
        out[key] = out.get(key, 0) + count
    return out


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        total[key] = total.get(key, 0) + value


def flavors(spec: Spec) -> list[Flavor]:
    """One flavor per k8s-worker group that has nodes: groups without GPUs first, then spec order."""
    workers = nodes_with(spec, Role.K8S_WORKER)
    out: list[Flavor] = []
    for group in spec.node_groups:
        capacity: dict[str, int] = {"cpu": 0, "memory": 0, GPU_RESOURCE: 0, "gpus": 0}
        members = [n for n in workers if n.group == group.name]
        for node in members:
            _add(capacity, node_capacity(spec, node))
        if members:
            out.append(Flavor(k8s_name(group.name), group.name, capacity))
    return sorted(out, key=lambda f: f.capacity["gpus"] > 0)


def worker_capacity(spec: Spec) -> dict[str, int]:
    """What the k8s workers offer together (the flavors' capacities summed); ``gpus``: physical GPUs."""
    total: dict[str, int] = {"cpu": 0, "memory": 0, GPU_RESOURCE: 0, "gpus": 0}
    for flavor in flavors(spec):
        _add(total, flavor.capacity)
    return total


def covered_resources(spec: Spec) -> list[str]:
    """The resources every tenant's queue covers: cpu, memory, GPUs and the workers' MIG profiles."""
    return ["cpu", "memory", GPU_RESOURCE, *sorted(r for r in worker_capacity(spec) if r.startswith("nvidia.com/mig-"))]


# --------------------------------------------------------------------------- quotas


def split(total: int, weights: list[int]) -> list[int]:
    """``total`` in parts proportional to ``weights`` that sum to exactly ``total`` (largest remainder,
    ties to the earlier part); all-zero weights split it equally."""
    if not weights:
        return []
    weights = weights if any(weights) else [1] * len(weights)
    whole = sum(weights)
    parts = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _given(t: Tenant) -> dict[str, int]:
    """The totals the spec gives for a tenant (the rest are shares of the flavors)."""
    given = {GPU_RESOURCE: t.gpu_quota}
    if t.cpu_quota is not None:
        given["cpu"] = t.cpu_quota
    if t.memory_quota_gi is not None:
        given["memory"] = t.memory_quota_gi
    given.update({mig_resource(p): n for p, n in t.mig_quota.items()})
    return given


def _weights(fl: list[Flavor], resource: str) -> list[int]:
    """How a given quota of ``resource`` is spread: by the flavors' capacity of it, else their GPUs."""
    weights = [f.capacity.get(resource, 0) for f in fl]
    return weights if any(weights) else [f.capacity["gpus"] for f in fl]


def flavor_quotas(spec: Spec, t: Tenant) -> list[dict[str, int]]:
    """A tenant's nominal quota of each covered resource in each flavor (``flavors`` order)."""
    fl = flavors(spec)
    share = _share(spec, t)
    covered = covered_resources(spec)
    quotas = [{r: f.capacity.get(r, 0) * share[0] // share[1] for r in covered} for f in fl]
    for resource, total in _given(t).items():
        for quota, part in zip(quotas, split(total, _weights(fl, resource)), strict=True):
            quota[resource] = part
    return quotas


def borrowing_limits(spec: Spec, t: Tenant) -> list[int | None]:
    """A tenant's ``nvidia.com/gpu`` borrowing limit in each flavor, split as a given quota is (None: no
    limit set, or a flavor that offers no whole GPU)."""
    fl = flavors(spec)
    if t.borrowing_limit is None:
        return [None] * len(fl)
    parts = split(t.borrowing_limit, _weights(fl, GPU_RESOURCE))
    return [p if f.capacity[GPU_RESOURCE] else None for f, p in zip(fl, parts, strict=True)]


def _share(spec: Spec, t: Tenant) -> tuple[int, int]:
    """The tenant's share of what the spec leaves out: its GPU quota's share of the workers' GPUs (an
    equal share when no tenant has GPUs)."""
    cap = worker_capacity(spec)
    tenants = kubernetes_section(spec).batch_queue.tenants
    gpus = sum(x.gpu_quota for x in tenants)
    return (t.gpu_quota, cap["gpus"]) if gpus and cap["gpus"] else (1, max(1, len(tenants)))


def tenant_quota(spec: Spec, t: Tenant) -> dict[str, int]:
    """A tenant's nominal quota of each covered resource over the whole cluster (Volcano's ``deserved``):
    what the spec gives, else its share of the workers' capacity, rounded down once."""
    cap = worker_capacity(spec)
    share = _share(spec, t)
    quota = {r: cap.get(r, 0) * share[0] // share[1] for r in covered_resources(spec)}
    quota.update(_given(t))
    return quota


# --------------------------------------------------------------------------- Kueue


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.lstrip("v").split(".")[:3])


def kueue_api_version(version: str) -> str:
    """The Kueue apiVersion served and stored by ``version``."""
    v1beta2 = _version_tuple(version)[:2] >= KUEUE_V1BETA2_SINCE
    return "kueue.x-k8s.io/v1beta2" if v1beta2 else "kueue.x-k8s.io/v1beta1"


def namespace_manifests(spec: Spec) -> list[dict[str, Any]]:
    """One Namespace per tenant."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": t.namespace, "labels": {"gpuforge.dev/tenant": k8s_name(t.name)}},
        }
        for t in kubernetes_section(spec).batch_queue.tenants
    ]


def resource_flavor(api: str, flavor: Flavor) -> dict[str, Any]:
    """The ResourceFlavor of one k8s-worker group: its nodes' group label (k8s_frameworks 'kueue-flavors')."""
    return {
        "apiVersion": api,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name},
        "spec": {"nodeLabels": {fw.NODE_GROUP_LABEL: flavor.name}},
    }


def _flavor_resources(covered: list[str], quota: dict[str, int], borrow: int | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in covered:
        item: dict[str, Any] = {"name": r, "nominalQuota": f"{quota[r]}Gi" if r == "memory" else quota[r]}
        if r == GPU_RESOURCE and borrow is not None:
            item["borrowingLimit"] = borrow
        out.append(item)
    return out


def cluster_queue(spec: Spec, api: str, t: Tenant) -> dict[str, Any]:
    """A tenant's ClusterQueue: its namespace only, one resource group over every flavor."""
    covered = covered_resources(spec)
    cohort_key = "cohortName" if api.endswith("v1beta2") else "cohort"
    per_flavor = zip(flavors(spec), flavor_quotas(spec, t), borrowing_limits(spec, t), strict=True)
    return {
        "apiVersion": api,
        "kind": "ClusterQueue",
        "metadata": {"name": k8s_name(t.name)},
        "spec": {
            cohort_key: k8s_name(spec.cluster.name),
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": covered,
                    "flavors": [
                        {"name": f.name, "resources": _flavor_resources(covered, quota, borrow)}
                        for f, quota, borrow in per_flavor
                    ],
                }
            ],
        },
    }


def kueue_manifests(spec: Spec) -> list[dict[str, Any]]:
    """Namespaces, a ResourceFlavor per k8s-worker group, a ClusterQueue per tenant (one shared cohort),
    LocalQueues. A nominal quota is guaranteed: borrowed GPUs are reclaimed by preemption when the owner
    needs them."""
    k = kubernetes_section(spec)
    api = kueue_api_version(k.batch_queue.version)
    docs: list[dict[str, Any]] = namespace_manifests(spec)
    docs += [resource_flavor(api, f) for f in flavors(spec)]
    docs += [cluster_queue(spec, api, t) for t in k.batch_queue.tenants]
    for t in k.batch_queue.tenants:
        docs.append(
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": KUEUE_LOCAL_QUEUE, "namespace": t.namespace},
                "spec": {"clusterQueue": k8s_name(t.name)},
            }
        )
    return docs


def manage_jobs_without_queue_name(spec: Spec) -> bool:
    """Kueue's ``manageJobsWithoutQueueName`` (k8s_day2 'kueue-config'): the spec's, else on when k8s
    workers have GPUs (a job without a queue label would run past every tenant's quota)."""
    bq = kubernetes_section(spec).batch_queue
    if bq.kind != "kueue" or not bq.tenants:
        return False
    return bq.manage_jobs_without_queue_name if bq.manage_jobs_without_queue_name is not None else (
        gpu_operator_needed(spec)
    )  # fmt: skip


def kueue_frameworks(spec: Spec) -> list[str]:
    """The Kueue integrations the enabled frameworks need (k8s_frameworks 'kueue-integrations')."""
    f = kubernetes_section(spec).frameworks
    enabled = {"kuberay": f.kuberay.enabled, "trainer": f.trainer.enabled}
    return [fw.KUEUE_FRAMEWORKS[name] for name, on in enabled.items() if on]


def kueue_config(spec: Spec) -> dict[str, Any] | None:
    """Kueue's ConfigMap: the release's own Configuration, with the integrations the frameworks need
    (added when the release's list lacks one) and (when on) ``manageJobsWithoutQueueName`` limited to the
    tenants' namespaces (``managedJobsNamespaceSelector``: a job without a queue label there gets the
    LocalQueue ``default``; kube-system and the operators' namespaces stay unmanaged). None for a cluster
    without Kueue tenants or a release whose configuration gpuforge does not know."""
    bq = kubernetes_section(spec).batch_queue
    base = day2.KUEUE_DEFAULT_CONFIG.get(bq.version if bq.version.startswith("v") else f"v{bq.version}")
    if bq.kind != "kueue" or not bq.tenants or base is None:
        return None
    config: dict[str, Any] = copy.deepcopy(base)
    integrations: dict[str, Any] = config.setdefault("integrations", {})
    listed: list[str] = integrations.setdefault("frameworks", [])
    listed += [name for name in kueue_frameworks(spec) if name not in listed]
    name, key = day2.KUEUE_CONFIGMAP
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": day2.KUEUE_NAMESPACE}}
    if manage_jobs_without_queue_name(spec):
        config["manageJobsWithoutQueueName"] = True
        namespaces = sorted({t.namespace for t in bq.tenants})
        config["managedJobsNamespaceSelector"] = {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]
        }
    return {**doc, "data": {key: LiteralStr(dump_yaml(config))}}


def kueue_config_file(spec: Spec) -> RenderedFile | None:
    doc = kueue_config(spec)
    return None if doc is None else RenderedFile(KUEUE_CONFIG, header() + dump_yaml_all([doc]))


# --------------------------------------------------------------------------- Volcano


def _volcano_deserved(spec: Spec, t: Tenant) -> dict[str, Any]:
    q = tenant_quota(spec, t)
    return {"cpu": q["cpu"], "memory": f"{q['memory']}Gi", GPU_RESOURCE: t.gpu_quota}


def volcano_manifests(spec: Spec) -> list[dict[str, Any]]:
    """Namespaces, a Volcano Queue per tenant, and the scheduler configuration that honours them.

    ``deserved`` is the tenant's quota; ``capability`` caps its GPUs at quota plus
    borrowing limit (all worker GPUs when no limit is given, as Kueue would allow).
    """
    k = kubernetes_section(spec)
    total = k8s_worker_gpus(spec)
    docs: list[dict[str, Any]] = namespace_manifests(spec)
    for t in k.batch_queue.tenants:
        cap = t.gpu_quota + t.borrowing_limit if t.borrowing_limit is not None else max(total, t.gpu_quota)
        docs.append(
            {
                "apiVersion": VOLCANO_API,
                "kind": "Queue",
                "metadata": {"name": k8s_name(t.name)},
                "spec": {
                    "weight": 1,
                    "reclaimable": True,
                    "deserved": _volcano_deserved(spec, t),
                    "capability": {GPU_RESOURCE: cap},
                },
            }
        )
    docs.append(volcano_scheduler_configmap())
    return docs


def volcano_scheduler_configmap() -> dict[str, Any]:
    """Volcano's scheduler ConfigMap with the capacity plugin: the queues' ``deserved`` quotas are
    honoured only by it, and the default configuration runs ``proportion`` instead."""
    namespace, name, key = VOLCANO_SCHEDULER_CONFIGMAP
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {key: LiteralStr(VOLCANO_SCHEDULER_CONF)},
    }


def batch_queue_file(spec: Spec) -> RenderedFile | None:
    """The batch-queue manifests as one file, or None (kind none, or no tenants)."""
    bq = kubernetes_section(spec).batch_queue
    if bq.kind == "kueue" and bq.tenants:
        return RenderedFile(KUEUE_MANIFESTS, header() + dump_yaml_all(kueue_manifests(spec)))
    if bq.kind == "volcano" and bq.tenants:
        return RenderedFile(VOLCANO_MANIFESTS, header() + dump_yaml_all(volcano_manifests(spec)))
    return None

"""Kubernetes configuration: GPU Operator values, batch-queue manifests, node prerequisites.

Small pure functions, spec in, data or text out. ``kubernetes_files`` puts the cluster
manifests on the first k8s-control-plane node under ``/etc/gpuforge/k8s/`` and the kernel
prerequisites on every Kubernetes node.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuforge.render.files import RenderedFile, Secrets, header, per_spec, render_template
from gpuforge.render.nvidia import LiteralStr, dump_yaml, dump_yaml_all
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec.mig import mig_layout
from gpuforge.spec.model import K8S_ROLES, DriverFlavor, Kubernetes, ManagedBy, MigStrategy, Role, Spec, Tenant
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.nvidia_packages import GPU_OPERATOR_HELM_FLAGS
from gpuforge.spec.types import k8s_name, mig_resource

MANIFEST_DIR = "/etc/gpuforge/k8s"
GPU_OPERATOR_VALUES = f"{MANIFEST_DIR}/gpu-operator-values.yaml"
KUEUE_MANIFESTS = f"{MANIFEST_DIR}/kueue.yaml"
VOLCANO_MANIFESTS = f"{MANIFEST_DIR}/volcano.yaml"
KUEUE_CONFIG = f"{MANIFEST_DIR}/kueue-config.yaml"
MODULES_LOAD = "/etc/modules-load.d/gpuforge-k8s.conf"
K8S_SYSCTL = "/etc/sysctl.d/90-gpuforge-k8s.conf"

GPU_OPERATOR_RELEASE = "gpu-operator"
GPU_OPERATOR_CHART = "nvidia/gpu-operator"
GPU_RESOURCE = "nvidia.com/gpu"
TIME_SLICING_CONFIGMAP = "time-slicing-config"
TIME_SLICING_KEY = "any"
KUEUE_FLAVOR = "default-flavor"
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

K8S_MODULES = ("overlay", "br_netfilter")
K8S_SYSCTLS = (
    ("net.bridge.bridge-nf-call-iptables", "1"),
    ("net.bridge.bridge-nf-call-ip6tables", "1"),
    ("net.ipv4.ip_forward", "1"),
)


def kubernetes_section(spec: Spec) -> Kubernetes:
    if spec.kubernetes is None:
        raise ValueError("spec has no kubernetes section")
    return spec.kubernetes


# --------------------------------------------------------------------------- GPU Operator


def _mig_resources(spec: Spec) -> list[str]:
    """``nvidia.com/mig-<profile>`` resources the k8s workers offer (mixed strategy)."""
    profiles: list[str] = []
    for group in spec.node_groups:
        if Role.K8S_WORKER not in group.roles or not group.mig_config or group.hardware.gpu is None:
            continue
        for entry in spec.mig.configs.get(group.mig_config, []):
            if entry.mig_enabled:
                profiles.extend(p for p in entry.mig_devices if p not in profiles)
    return [mig_resource(p) for p in profiles]


def time_slicing_config(spec: Spec) -> dict[str, Any] | None:
    """The device plugin's config (``version: v1``, ``sharing.timeSlicing``); None when off."""
    op = kubernetes_section(spec).gpu_operator
    if op.time_slicing_replicas <= 0:
        return None
    names = [GPU_RESOURCE]
    if op.mig_strategy is MigStrategy.MIXED:
        names += _mig_resources(spec)
    return {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "resources": [{"name": n, "replicas": op.time_slicing_replicas} for n in names],
            }
        },
    }


def operator_cdi(spec: Spec) -> bool:
    """The operator's ``cdi.enabled``: only together with the operator's own toolkit.

    ``cdi.enabled`` makes the operator install the ``nvidia-cdi``/``nvidia-legacy`` runtime
    classes and configure CDI through its toolkit container (GPU Operator docs, Install NVIDIA GPU
    Operator, chart customization options: ``cdi.enabled``); with the host's toolkit
    (``toolkit.enabled: false``) nothing would configure the runtime for it, so NVIDIA's Cloud
    Native Stack sets it only with the operator's toolkit. gpuforge follows CNS: with a host
    toolkit, the host's toolkit layer writes the CDI spec (``container_runtime.cdi``) and the
    operator leaves CDI alone.
    """
    op = kubernetes_section(spec).gpu_operator
    return spec.container_runtime.cdi and op.toolkit is ManagedBy.OPERATOR


#: The device plugin hands a container its GPUs as volume mounts, the only list the toolkit accepts
#: from unprivileged containers once ``NVIDIA_VISIBLE_DEVICES`` is refused (GPU Operator docs,
#: Security Considerations, "Preventing Unprivileged Access to GPUs"; k8s_upstream.SOURCES
#: "gpu-operator-unprivileged", "device-plugin-list-strategy").
DEVICE_PLUGIN_ENV = {"DEVICE_LIST_STRATEGY": "volume-mounts"}
#: The operator's toolkit container writes the same two settings the host's toolkit layer sets with
#: nvidia-ctk (``gpuforge.render.nvidia.UNPRIVILEGED_GPU_SETTINGS``), from these variables.
OPERATOR_TOOLKIT_ENV = {
    "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
    "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true",
}


def gpu_operator_values(spec: Spec) -> dict[str, Any]:
    """Overrides of the GPU Operator chart's values (every key path exists in its values.yaml).

    gpuforge applies MIG layouts with the host's nvidia-mig-manager, so the operator's MIG
    manager stays off (it would otherwise label nodes ``all-disabled`` and undo them).
    dcgm-exporter's ServiceMonitor needs the Prometheus Operator, which gpuforge does not
    install, so it is off as well. Unprivileged pods get only the GPUs they request: the device
    plugin passes them as volume mounts (``devicePlugin.env``), and the toolkit, the host's
    (``gpuforge.render.nvidia.restrict_unprivileged_gpus``) or the operator's (``toolkit.env``),
    ignores their ``NVIDIA_VISIBLE_DEVICES``.
    """
    k = kubernetes_section(spec)
    op = k.gpu_operator
    driver: dict[str, Any] = {"enabled": op.driver is ManagedBy.OPERATOR}
    if op.driver is ManagedBy.OPERATOR and spec.versions.driver is not None:
        driver["version"] = spec.versions.driver.version
        driver["kernelModuleType"] = "open" if spec.versions.driver.flavor is DriverFlavor.OPEN else "proprietary"
    toolkit: dict[str, Any] = {"enabled": op.toolkit is ManagedBy.OPERATOR}
    if op.toolkit is ManagedBy.OPERATOR:
        toolkit["version"] = f"v{spec.versions.container_toolkit}"
        toolkit["env"] = [{"name": k, "value": v} for k, v in OPERATOR_TOOLKIT_ENV.items()]
    values: dict[str, Any] = {
        "cdi": {"enabled": operator_cdi(spec)},
        "driver": driver,
        "toolkit": toolkit,
        "mig": {"strategy": op.mig_strategy.value},
        "migManager": {"enabled": False},
        "dcgmExporter": {"enabled": op.dcgm_exporter, "serviceMonitor": {"enabled": False}},
    }
    device_plugin: dict[str, Any] = {"env": [{"name": k, "value": v} for k, v in DEVICE_PLUGIN_ENV.items()]}
    ts = time_slicing_config(spec)
    if ts is not None:
        device_plugin["config"] = {
            "create": True,
            "name": TIME_SLICING_CONFIGMAP,
            "default": TIME_SLICING_KEY,
            "data": {TIME_SLICING_KEY: LiteralStr(dump_yaml(ts))},
        }
    values["devicePlugin"] = device_plugin
    return values


@per_spec
def gpu_operator_values_yaml(spec: Spec) -> str:
    """/etc/gpuforge/k8s/gpu-operator-values.yaml."""
    return header() + dump_yaml(gpu_operator_values(spec))


def helm_gpu_operator_argv(
    spec: Spec, values_file: str = GPU_OPERATOR_VALUES, chart: str = GPU_OPERATOR_CHART
) -> list[str]:
    """``helm upgrade --install`` for the GPU Operator, as argv (idempotent on re-runs)."""
    op = kubernetes_section(spec).gpu_operator
    return [
        "helm", "upgrade", "--install", GPU_OPERATOR_RELEASE, chart,
        "--namespace", op.namespace, "--create-namespace",
        "--version", spec.versions.gpu_operator,
        *GPU_OPERATOR_HELM_FLAGS,  # the chart's CRD-upgrade hook (nvidia_packages gpu-operator-upgrade)
        "-f", values_file,
    ]  # fmt: skip


# --------------------------------------------------------------------------- batch queues


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


def worker_capacity(spec: Spec) -> dict[str, int]:
    """What the k8s workers offer together: ``cpu``, ``memory`` (GiB) and their GPUs as the operator's
    MIG strategy offers them (``none``: every GPU; ``single``: whole GPUs and MIG devices alike as
    ``nvidia.com/gpu``; ``mixed``: whole GPUs, and each profile's devices as ``nvidia.com/mig-<profile>``),
    from the spec's hardware and MIG layouts. ``gpus`` counts the physical GPUs."""
    strategy = kubernetes_section(spec).gpu_operator.mig_strategy
    total: dict[str, int] = {"cpu": 0, "memory": 0, GPU_RESOURCE: 0, "gpus": 0}
    for n in nodes_with(spec, Role.K8S_WORKER):
        total["cpu"] += n.hardware.cpus
        total["memory"] += n.hardware.real_memory_mb // 1024
        total["gpus"] += n.hardware.gpu_count
        gpu = n.hardware.gpu
        if gpu is None or not n.mig_config or strategy is MigStrategy.NONE:
            total[GPU_RESOURCE] += n.hardware.gpu_count
            continue
        layout = mig_layout(spec.mig.configs.get(n.mig_config, []), gpu.count)
        total[GPU_RESOURCE] += layout.full_gpus
        for profile, count in sorted(layout.devices.items()):
            key = GPU_RESOURCE if strategy is MigStrategy.SINGLE else mig_resource(profile)
            total[key] = total.get(key, 0) + count
    return total


def covered_resources(spec: Spec) -> list[str]:
    """The resources every tenant's queue covers: cpu, memory, GPUs and the workers' MIG profiles."""
    return ["cpu", "memory", GPU_RESOURCE, *sorted(r for r in worker_capacity(spec) if r.startswith("nvidia.com/mig-"))]


def tenant_quota(spec: Spec, t: Tenant) -> dict[str, int]:
    """A tenant's nominal quota of each covered resource. GPUs are its ``gpu_quota``; what the spec does
    not give is its share of the workers' capacity, the share its GPU quota has of their GPUs (an equal
    share when no tenant has GPUs), rounded down."""
    k = kubernetes_section(spec)
    cap = worker_capacity(spec)
    tenants = k.batch_queue.tenants
    gpus = sum(x.gpu_quota for x in tenants)
    share = (t.gpu_quota, cap["gpus"]) if gpus and cap["gpus"] else (1, max(1, len(tenants)))
    quota = {r: cap.get(r, 0) * share[0] // share[1] for r in covered_resources(spec)}
    quota[GPU_RESOURCE] = t.gpu_quota
    if t.cpu_quota is not None:
        quota["cpu"] = t.cpu_quota
    if t.memory_quota_gi is not None:
        quota["memory"] = t.memory_quota_gi
    for profile, n in t.mig_quota.items():
        quota[mig_resource(profile)] = n
    return quota


def _kueue_resources(spec: Spec, t: Tenant) -> list[dict[str, Any]]:
    quota = tenant_quota(spec, t)
    out: list[dict[str, Any]] = []
    for r in covered_resources(spec):
        item: dict[str, Any] = {"name": r, "nominalQuota": f"{quota[r]}Gi" if r == "memory" else quota[r]}
        if r == GPU_RESOURCE and t.borrowing_limit is not None:
            item["borrowingLimit"] = t.borrowing_limit
        out.append(item)
    return out


def kueue_manifests(spec: Spec) -> list[dict[str, Any]]:
    """Namespaces, one ResourceFlavor, a ClusterQueue per tenant (one shared cohort), LocalQueues.

    Each ClusterQueue admits workloads of its tenant's namespace only; its nominal quota is
    guaranteed: borrowed GPUs are reclaimed by preemption when the owner needs them.
    """
    k = kubernetes_section(spec)
    api = kueue_api_version(k.batch_queue.version)
    cohort_key = "cohortName" if api.endswith("v1beta2") else "cohort"
    cohort = k8s_name(spec.cluster.name)
    docs: list[dict[str, Any]] = namespace_manifests(spec)
    docs.append({"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": KUEUE_FLAVOR}})
    for t in k.batch_queue.tenants:
        docs.append(
            {
                "apiVersion": api,
                "kind": "ClusterQueue",
                "metadata": {"name": k8s_name(t.name)},
                "spec": {
                    cohort_key: cohort,
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": t.namespace}},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": covered_resources(spec),
                            "flavors": [{"name": KUEUE_FLAVOR, "resources": _kueue_resources(spec, t)}],
                        }
                    ],
                },
            }
        )
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


def k8s_worker_gpus(spec: Spec) -> int:
    """GPUs on all k8s-worker nodes together."""
    return sum(n.hardware.gpu_count for n in nodes_with(spec, Role.K8S_WORKER))


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


def manage_jobs_without_queue_name(spec: Spec) -> bool:
    """Kueue's ``manageJobsWithoutQueueName`` (k8s_day2 'kueue-config'): the spec's, else on when k8s
    workers have GPUs (a job without a queue label would run past every tenant's quota)."""
    bq = kubernetes_section(spec).batch_queue
    if bq.kind != "kueue" or not bq.tenants:
        return False
    return bq.manage_jobs_without_queue_name if bq.manage_jobs_without_queue_name is not None else (
        gpu_operator_needed(spec)
    )  # fmt: skip


def kueue_config(spec: Spec) -> dict[str, Any] | None:
    """Kueue's ConfigMap: the release's own Configuration, plus (when on) ``manageJobsWithoutQueueName``
    limited to the tenants' namespaces (``managedJobsNamespaceSelector``: a job without a queue label there
    gets the LocalQueue ``default``; kube-system and the operators' namespaces stay unmanaged). None for a
    cluster without Kueue tenants or a release whose configuration gpuforge does not know."""
    bq = kubernetes_section(spec).batch_queue
    base = day2.KUEUE_DEFAULT_CONFIG.get(bq.version if bq.version.startswith("v") else f"v{bq.version}")
    if bq.kind != "kueue" or not bq.tenants or base is None:
        return None
    config = copy.deepcopy(base)
    name, key = day2.KUEUE_CONFIGMAP
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": day2.KUEUE_NAMESPACE}}
    if not manage_jobs_without_queue_name(spec):
        return {**doc, "data": {key: LiteralStr(dump_yaml(config))}}
    config["manageJobsWithoutQueueName"] = True
    namespaces = sorted({t.namespace for t in bq.tenants})
    config["managedJobsNamespaceSelector"] = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]
    }
    return {**doc, "data": {key: LiteralStr(dump_yaml(config))}}


def kueue_config_file(spec: Spec) -> RenderedFile | None:
    doc = kueue_config(spec)
    return None if doc is None else RenderedFile(KUEUE_CONFIG, header() + dump_yaml_all([doc]))


def batch_queue_file(spec: Spec) -> RenderedFile | None:
    """The batch-queue manifests as one file, or None (kind none, or no tenants)."""
    bq = kubernetes_section(spec).batch_queue
    if bq.kind == "kueue" and bq.tenants:
        return RenderedFile(KUEUE_MANIFESTS, header() + dump_yaml_all(kueue_manifests(spec)))
    if bq.kind == "volcano" and bq.tenants:
        return RenderedFile(VOLCANO_MANIFESTS, header() + dump_yaml_all(volcano_manifests(spec)))
    return None


# --------------------------------------------------------------------------- node prerequisites


def modules_load_conf() -> str:
    """/etc/modules-load.d/gpuforge-k8s.conf."""
    return render_template("kubernetes/modules-load.conf.j2", header=header().rstrip("\n"), modules=K8S_MODULES)


def k8s_sysctl_conf() -> str:
    """/etc/sysctl.d/90-gpuforge-k8s.conf."""
    return render_template("kubernetes/sysctl.conf.j2", header=header().rstrip("\n"), settings=K8S_SYSCTLS)


def gpu_operator_needed(spec: Spec) -> bool:
    """Some k8s-worker has GPUs."""
    return any(n.hardware.gpu is not None for n in nodes_with(spec, Role.K8S_WORKER))


def kubernetes_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """Every Kubernetes file a node needs ([] for a spec without a kubernetes section)."""
    del secrets  # no secrets in this layer
    if spec.kubernetes is None or not node.roles & K8S_ROLES:
        return []
    files: list[RenderedFile] = []
    if spec.kubernetes.kernel_setup:
        files += [RenderedFile(MODULES_LOAD, modules_load_conf()), RenderedFile(K8S_SYSCTL, k8s_sysctl_conf())]
    control_planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    if control_planes and control_planes[0].name == node.name:
        if gpu_operator_needed(spec):
            files.append(RenderedFile(GPU_OPERATOR_VALUES, gpu_operator_values_yaml(spec)))
        queue = batch_queue_file(spec)
        if queue is not None:
            files.append(queue)
        config = kueue_config_file(spec)
        if config is not None:
            files.append(config)
    return files

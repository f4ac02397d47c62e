"""Kubernetes configuration: GPU Operator values, node prerequisites, and every cluster file.

Small pure functions, spec in, data or text out. ``kubernetes_files`` puts the cluster
manifests on the first k8s-control-plane node under ``/etc/gpuforge/k8s/`` and the kernel
prerequisites on every Kubernetes node. The batch queues are :mod:`gpuforge.render.k8s_queues`,
the frameworks :mod:`gpuforge.render.k8s_frameworks`; their names are re-exported here.
"""

from __future__ import annotations

from typing import Any

from gpuforge.render import k8s_frameworks as frameworks
from gpuforge.render import k8s_network_operator
from gpuforge.render.files import RenderedFile, Secrets, header, per_spec, render_template
from gpuforge.render.k8s_common import GPU_RESOURCE as GPU_RESOURCE
from gpuforge.render.k8s_common import MANIFEST_DIR as MANIFEST_DIR
from gpuforge.render.k8s_common import gpu_operator_needed as gpu_operator_needed
from gpuforge.render.k8s_common import k8s_worker_gpus as k8s_worker_gpus
from gpuforge.render.k8s_common import kubernetes_section as kubernetes_section
from gpuforge.render.k8s_queues import KUEUE_CONFIG as KUEUE_CONFIG
from gpuforge.render.k8s_queues import KUEUE_LOCAL_QUEUE as KUEUE_LOCAL_QUEUE
from gpuforge.render.k8s_queues import KUEUE_MANIFESTS as KUEUE_MANIFESTS
from gpuforge.render.k8s_queues import VOLCANO_MANIFESTS as VOLCANO_MANIFESTS
from gpuforge.render.k8s_queues import batch_queue_file as batch_queue_file
from gpuforge.render.k8s_queues import covered_resources as covered_resources
from gpuforge.render.k8s_queues import kueue_api_version as kueue_api_version
from gpuforge.render.k8s_queues import kueue_config as kueue_config
from gpuforge.render.k8s_queues import kueue_config_file as kueue_config_file
from gpuforge.render.k8s_queues import kueue_manifests as kueue_manifests
from gpuforge.render.k8s_queues import manage_jobs_without_queue_name as manage_jobs_without_queue_name
from gpuforge.render.k8s_queues import namespace_manifests as namespace_manifests
from gpuforge.render.k8s_queues import tenant_quota as tenant_quota
from gpuforge.render.k8s_queues import volcano_manifests as volcano_manifests
from gpuforge.render.k8s_queues import volcano_scheduler_configmap as volcano_scheduler_configmap
from gpuforge.render.k8s_queues import worker_capacity as worker_capacity
from gpuforge.render.nvidia import LiteralStr, dump_yaml
from gpuforge.spec.k8s_model import operator_dcgm_exporter
from gpuforge.spec.model import K8S_ROLES, DriverFlavor, ManagedBy, MigStrategy, Role, Spec
from gpuforge.spec.nodes import Node, nodes_with
from gpuforge.spec.nvidia_packages import GPU_OPERATOR_HELM_FLAGS
from gpuforge.spec.types import mig_resource

GPU_OPERATOR_VALUES = f"{MANIFEST_DIR}/gpu-operator-values.yaml"
MODULES_LOAD = "/etc/modules-load.d/gpuforge-k8s.conf"
K8S_SYSCTL = "/etc/sysctl.d/90-gpuforge-k8s.conf"

GPU_OPERATOR_RELEASE = "gpu-operator"
GPU_OPERATOR_CHART = "nvidia/gpu-operator"
TIME_SLICING_CONFIGMAP = "time-slicing-config"
TIME_SLICING_KEY = "any"

K8S_MODULES = ("overlay", "br_netfilter")
K8S_SYSCTLS = (
    ("net.bridge.bridge-nf-call-iptables", "1"),
    ("net.bridge.bridge-nf-call-ip6tables", "1"),
    ("net.ipv4.ip_forward", "1"),
)


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
    driver["upgradePolicy"] = driver_upgrade_policy(spec)
    driver.update(k8s_network_operator.gpu_operator_rdma(spec))  # GPUDirect RDMA with the Network Operator
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
        "dcgmExporter": {
            "enabled": operator_dcgm_exporter(op, spec.dcgm.enabled),
            "serviceMonitor": {"enabled": False},
        },
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


def driver_upgrade_policy(spec: Spec) -> dict[str, Any]:
    """``driver.upgradePolicy``: the driver upgrade controller as the spec says (k8s_frameworks
    'gpu-driver-upgrades'); the chart's other policy values (waitForCompletion, pod deletion's force and
    emptyDir, the drain's force, selector and emptyDir) stay at their defaults. A number of nodes is an
    integer, a percentage a string (the field is an int-or-string)."""
    up = kubernetes_section(spec).gpu_operator.driver_upgrade
    unavailable: int | str = int(up.max_unavailable) if up.max_unavailable.isdigit() else up.max_unavailable
    return {
        "autoUpgrade": up.auto_upgrade,
        "maxParallelUpgrades": up.max_parallel_upgrades,
        "maxUnavailable": unavailable,
        "gpuPodDeletion": {"timeoutSeconds": up.pod_deletion_timeout_s},
        "drain": {"enable": up.drain, "timeoutSeconds": up.drain_timeout_s},
    }


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


# --------------------------------------------------------------------------- node prerequisites


def modules_load_conf() -> str:
    """/etc/modules-load.d/gpuforge-k8s.conf."""
    return render_template("kubernetes/modules-load.conf.j2", header=header().rstrip("\n"), modules=K8S_MODULES)


def k8s_sysctl_conf() -> str:
    """/etc/sysctl.d/90-gpuforge-k8s.conf."""
    return render_template("kubernetes/sysctl.conf.j2", header=header().rstrip("\n"), settings=K8S_SYSCTLS)


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
        files += frameworks.framework_files(spec)
        files += k8s_network_operator.network_operator_files(spec)
    return files

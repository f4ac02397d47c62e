"""The spec's Kubernetes section: the GPU Operator, queues and tenants, CNI, the API endpoint."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import field_validator, model_validator

from gpuforge.spec.k8s_addons_model import DriverUpgrade, Frameworks
from gpuforge.spec.k8s_lifecycle import ApiEndpoint, CertRenewal, EtcdSnapshots, InterfaceName
from gpuforge.spec.k8s_upstream import QUEUE_DEFAULT_VERSIONS
from gpuforge.spec.network_operator_model import NetworkOperator
from gpuforge.spec.platforms import Arch as Arch
from gpuforge.spec.platforms import OsFamily as OsFamily
from gpuforge.spec.policy import live, rebuild, rolling
from gpuforge.spec.strict import NAME as NAME
from gpuforge.spec.strict import Name, StrictModel
from gpuforge.spec.types import (
    IpNetwork,
    MigProfileName,
)

# --------------------------------------------------------------------------- kubernetes


class ManagedBy(StrEnum):
    HOST = "host"
    OPERATOR = "operator"


class MigStrategy(StrEnum):
    NONE = "none"
    SINGLE = "single"
    MIXED = "mixed"


class GpuOperator(StrictModel):
    """NVIDIA GPU Operator (helm)."""

    driver: ManagedBy = rolling(ManagedBy.HOST, "host (gpuforge installs it) or operator (containerised)")
    toolkit: ManagedBy = rolling(ManagedBy.HOST, "host or operator")
    mig_strategy: MigStrategy = rolling(MigStrategy.NONE, "none, single or mixed")
    time_slicing_replicas: int = live(0, "Time-slicing replicas per GPU (0 = off)", ge=0, le=64)
    dcgm_exporter: bool | None = live(
        None,
        "Deploy dcgm-exporter through the operator (default: only when dcgm.enabled is false; otherwise gpuforge runs "
        "DCGM and dcgm-exporter on the host)",
    )
    namespace: str = rebuild("gpu-operator", "Namespace", pattern=r"^[a-z0-9-]+$")
    driver_upgrade: DriverUpgrade = live(
        default_factory=DriverUpgrade, description="Driver upgrades by the operator (driver: operator only)"
    )


def operator_dcgm_exporter(op: GpuOperator, host_dcgm: bool) -> bool:
    """Whether the GPU Operator deploys dcgm-exporter: as the spec says, else only where the host runs no DCGM
    (two host engines on the same GPUs break profiling metrics)."""
    return op.dcgm_exporter if op.dcgm_exporter is not None else not host_dcgm


class Tenant(StrictModel):
    """A team with a namespace and a GPU quota."""

    name: Name = live(description="Tenant name")
    namespace: str = live(description="Namespace of its workloads", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    gpu_quota: int = live(description="GPUs guaranteed (nominal quota)", ge=0)
    cpu_quota: int | None = live(
        None, "CPUs (nominal quota); default: its share of the k8s workers' CPUs, as its share of their GPUs", ge=0
    )
    memory_quota_gi: int | None = live(
        None, "Memory in GiB (nominal quota); default: its share of the k8s workers' memory, as for CPUs", ge=0
    )
    mig_quota: dict[MigProfileName, int] = live(
        default_factory=dict,
        description="MIG devices per profile (mixed strategy), e.g. 1g.10gb: 14; default per profile: its share "
        "of the workers' devices, as its share of their GPUs",
    )
    borrowing_limit: int | None = live(None, "GPUs it may borrow beyond its quota (Kueue)", ge=0)


class BatchQueue(StrictModel):
    """Batch queueing on Kubernetes."""

    @model_validator(mode="before")
    @classmethod
    def _default_for_kind(cls, data: object) -> object:
        """A queue named without a version gets its own controller's default (QUEUE_DEFAULT_VERSIONS)."""
        if not isinstance(data, dict) or "version" in data:
            return data
        kind = data.get("kind")
        if isinstance(kind, str) and kind in QUEUE_DEFAULT_VERSIONS:
            return {**data, "version": QUEUE_DEFAULT_VERSIONS[kind]}
        return data  # anything else is the field validators' to judge

    kind: Literal["kueue", "volcano", "none"] = live("kueue", "kueue, volcano or none")
    version: str = live(
        QUEUE_DEFAULT_VERSIONS["kueue"],
        f"Release of the queue controller (default: kueue {QUEUE_DEFAULT_VERSIONS['kueue']}, volcano "
        f"{QUEUE_DEFAULT_VERSIONS['volcano']})",
        pattern=r"^v?\d+\.\d+\.\d+$",
    )
    tenants: list[Tenant] = live(default_factory=list, description="Tenants with GPU quotas")
    manage_jobs_without_queue_name: bool | None = live(
        None,
        "Kueue suspends jobs without a queue label in the tenants' namespaces until a queue admits them (they get "
        "the tenant's LocalQueue 'default'); default: on when k8s workers have GPUs, since otherwise such a job "
        "bypasses every quota",
    )


class Cni(StrictModel):
    """The pod network, applied once from the plugin's pinned manifest (re-applied when it changes)."""

    plugin: Literal["flannel", "calico"] = live("flannel", "flannel or calico")
    version: str | None = live(
        None, "Release of the plugin (default: flannel v0.28.9, calico v3.32.1)", pattern=r"^v\d+\.\d+\.\d+$"
    )


class Kubernetes(StrictModel):
    """Kubernetes settings (only with cluster.scheduler: kubernetes)."""

    @field_validator("api_endpoint", mode="before")
    @classmethod
    def _plain_endpoint(cls, v: object) -> object:
        """A plain address (the form before kube-vip) is an external endpoint."""
        return {"type": "external", "address": v} if isinstance(v, str) else v

    api_endpoint: ApiEndpoint | None = rebuild(
        None,
        "Stable address of the API server in front of every control plane: {type: kube-vip, address: <VIP>} "
        "(gpuforge runs kube-vip) or {type: external, address: ...} (the site's load balancer or DNS name; a "
        "plain address is taken as this); default: the first control plane's address",
    )
    node_interface: InterfaceName | None = rebuild(
        None,
        "Interface of the cluster network on every Kubernetes node: pins kubelet's --node-ip (the node's address "
        "in the spec, which must be on it), flannel's --iface (calico detects its own) and kube-vip's interface; "
        "default: the interface of the default route",
    )
    pod_cidr: IpNetwork = rebuild("10.244.0.0/16", "Pod network CIDR (no zone ID)")
    cni: Cni = live(default_factory=Cni, description="Pod network plugin")
    service_cidr: IpNetwork = rebuild("10.96.0.0/12", "Service CIDR (no zone ID)")
    gpu_operator: GpuOperator = live(default_factory=GpuOperator, description="GPU Operator options")
    batch_queue: BatchQueue = live(default_factory=BatchQueue, description="Batch queue and tenants")
    kernel_setup: bool = live(
        True,
        "Load overlay and br_netfilter and set the bridge and forwarding sysctls on every Kubernetes node; "
        "false only where nodes share a kernel gpuforge must not change (containers, such as the lab)",
    )
    certificates: CertRenewal = live(default_factory=CertRenewal, description="Certificate renewal timer")
    etcd_snapshots: EtcdSnapshots = live(default_factory=EtcdSnapshots, description="etcd snapshots")
    frameworks: Frameworks = live(default_factory=Frameworks, description="Training and serving frameworks")
    network_operator: NetworkOperator = live(default_factory=NetworkOperator, description="NVIDIA Network Operator")

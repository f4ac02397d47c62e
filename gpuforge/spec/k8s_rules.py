"""Cross-field rules of the ``kubernetes`` section: tenants and their quotas, what kubeadm and
pkgs.k8s.io need, one DCGM host engine per GPU, and the day-2 sections (``gpuforge.spec.k8s_lifecycle``).
Each problem names its field. Registered in :mod:`gpuforge.spec.rules` (``RULES``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from gpuforge.spec import hostlist, k8s_frameworks, k8s_upstream
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.mig import mig_layout
from gpuforge.spec.model import K8S_ROLES, ContainerEngine, MigStrategy, Role, Scheduler, Spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.spec.rule_helpers import dupes, role_nodes
from gpuforge.spec.types import k8s_name


def _is_ip(value: str | None) -> bool:
    try:
        ipaddress.ip_address(value or "")
    except ValueError:
        return False
    return True


def _is_ipv4(value: str) -> bool:
    try:
        return ipaddress.ip_address(value).version == 4
    except ValueError:
        return False


def worker_mig_profiles(spec: Spec) -> list[str]:
    """The MIG profiles k8s workers offer as resources of their own (``mixed`` strategy only)."""
    k = spec.kubernetes
    if k is None or k.gpu_operator.mig_strategy is not MigStrategy.MIXED:
        return []
    profiles: list[str] = []
    for node in resolve_nodes(spec):
        if node.has(Role.K8S_WORKER) and node.mig_config and node.hardware.gpu is not None:
            layout = mig_layout(spec.mig.configs.get(node.mig_config, []), node.hardware.gpu.count)
            profiles.extend(p for p in layout.devices if p not in profiles)
    return sorted(profiles)


def _endpoint_rules(spec: Spec) -> Iterator[SpecIssue]:
    k = spec.kubernetes
    assert k is not None
    nodes = [n for n in resolve_nodes(spec) if n.roles & K8S_ROLES]
    if k.node_interface is not None:
        named = sorted(n.name for n in nodes if not _is_ip(n.address))
        if named:
            yield SpecIssue(
                ("kubernetes", "node_interface"),
                f"kubelet's --node-ip is the node's address on {k.node_interface}: {hostlist.compress(named)} have "
                "no IP address in the spec (give address_start or addresses)",
            )
    ep = k.api_endpoint
    if ep is not None and not ep.kube_vip and (ep.interface is not None or "version" in ep.model_fields_set):
        yield SpecIssue(("kubernetes", "api_endpoint"), "interface and version are kube-vip's: type is external")
    if ep is not None and ep.kube_vip:
        if not _is_ipv4(ep.address):
            yield SpecIssue(
                ("kubernetes", "api_endpoint", "address"), f"{ep.address!r}: kube-vip's VIP is an IPv4 address"
            )
        if ep.interface is None and k.node_interface is None:
            yield SpecIssue(
                ("kubernetes", "api_endpoint", "interface"),
                "kube-vip announces the VIP on an interface of the control planes: set api_endpoint.interface or "
                "kubernetes.node_interface",
            )
        taken = [n.name for n in resolve_nodes(spec) if n.address == ep.address]
        if taken:
            yield SpecIssue(
                ("kubernetes", "api_endpoint", "address"),
                f"{ep.address} is the address of {', '.join(taken)}: the VIP must be an unused address",
            )


def _quota_rules(spec: Spec) -> Iterator[SpecIssue]:
    k = spec.kubernetes
    assert k is not None
    offered = worker_mig_profiles(spec)
    for i, tenant in enumerate(k.batch_queue.tenants):
        unknown = sorted(set(tenant.mig_quota) - set(offered))
        if unknown:
            what = ", ".join(offered) if offered else "none (MIG resources exist with the mixed strategy only)"
            yield SpecIssue(
                ("kubernetes", "batch_queue", "tenants", i, "mig_quota"),
                f"no k8s worker offers {', '.join(unknown)}; offered: {what}",
            )
    if k.batch_queue.manage_jobs_without_queue_name and k.batch_queue.kind != "kueue":
        yield SpecIssue(
            ("kubernetes", "batch_queue", "manage_jobs_without_queue_name"),
            f"a Kueue setting; batch_queue.kind is {k.batch_queue.kind}",
        )


def _framework_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Kubeflow Trainer's Kubernetes minimum (k8s_frameworks 'trainer-install'); one Kueue ResourceFlavor
    per k8s-worker group, so the groups' Kubernetes names must differ."""
    k = spec.kubernetes
    assert k is not None
    minor = k8s_upstream.minor_of(spec.versions.kubernetes)
    if k.frameworks.trainer.enabled and minor < k8s_frameworks.TRAINER_MIN_K8S_MINOR:
        yield SpecIssue(
            ("kubernetes", "frameworks", "trainer", "enabled"),
            f"Kubeflow Trainer needs Kubernetes 1.{k8s_frameworks.TRAINER_MIN_K8S_MINOR} or newer; "
            f"versions.kubernetes is {spec.versions.kubernetes}",
        )
    seen: dict[str, str] = {}
    for group in spec.node_groups:
        if Role.K8S_WORKER not in group.roles:
            continue
        name = k8s_name(group.name)
        if name in seen:
            yield SpecIssue(
                ("node_groups",),
                f"k8s-worker groups {seen[name]} and {group.name} are both {name!r} as Kubernetes names (a Kueue "
                "ResourceFlavor and a node label value each): rename one",
            )
        seen.setdefault(name, group.name)


def kubernetes_day2_rules(spec: Spec) -> Iterator[SpecIssue]:
    """The HA endpoint, the interface pin, the quotas and the maintenance timers."""
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    yield from _endpoint_rules(spec)
    yield from _quota_rules(spec)
    yield from _framework_rules(spec)
    certs = k.certificates
    if certs.enabled and certs.warn_days >= certs.renew_days_before:
        yield SpecIssue(
            ("kubernetes", "certificates", "warn_days"),
            f"{certs.warn_days} is not below renew_days_before ({certs.renew_days_before}): validate would fail "
            "certificates the timer has not been due to renew yet",
        )


def kubernetes_rules(spec: Spec) -> Iterator[SpecIssue]:
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    tenants = k.batch_queue.tenants
    for name in dupes(t.name for t in tenants):
        yield SpecIssue(("kubernetes", "batch_queue", "tenants"), f"tenant {name!r} is defined more than once")
    by_k8s_name: dict[str, list[str]] = {}
    for t in tenants:
        by_k8s_name.setdefault(k8s_name(t.name), []).append(t.name)
    for name in dupes(k8s_name(t.name) for t in tenants):
        same = by_k8s_name[name]
        if len(set(same)) > 1:
            yield SpecIssue(
                ("kubernetes", "batch_queue", "tenants"),
                f"tenants {' and '.join(repr(n) for n in same)} are the same Kubernetes name {name!r} "
                "('_' becomes '-'): rename one",
            )
    for ns in dupes(t.namespace for t in tenants):
        yield SpecIssue(("kubernetes", "batch_queue", "tenants"), f"namespace {ns!r} is used by two tenants")
    if tenants and k.batch_queue.kind == "none":
        yield SpecIssue(("kubernetes", "batch_queue", "kind"), "tenants need a batch queue: kueue or volcano")
    total = sum(n.hardware.gpu_count for n in resolve_nodes(spec) if n.has(Role.K8S_WORKER))
    quota = sum(t.gpu_quota for t in tenants)
    if quota > total:
        yield SpecIssue(
            ("kubernetes", "batch_queue", "tenants"),
            f"tenant GPU quotas add up to {quota}, more than the {total} GPUs on k8s-worker nodes",
        )


def kubeadm_rules(spec: Spec) -> Iterator[SpecIssue]:
    """What kubeadm and pkgs.k8s.io need (gpuforge.spec.k8s_upstream cites each)."""
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    version = spec.versions.kubernetes
    if k8s_upstream.minor_of(version) < k8s_upstream.FIRST_MINOR:
        yield SpecIssue(
            ("versions", "kubernetes"),
            f"Kubernetes {version} has no packages: pkgs.k8s.io starts at 1.{k8s_upstream.FIRST_MINOR} and the "
            f"Google-hosted repositories are gone; pick 1.{k8s_upstream.FIRST_MINOR} or later",
        )
    planes = role_nodes(spec, Role.K8S_CONTROL_PLANE)
    if len(planes) > 1 and k.api_endpoint is None:
        yield SpecIssue(
            ("kubernetes", "api_endpoint"),
            f"{len(planes)} control planes ({hostlist.compress(planes)}) need a stable API endpoint in front of "
            "them (a load balancer or DNS name, kubeadm's controlPlaneEndpoint): set kubernetes.api_endpoint, "
            "or keep one control plane",
        )
    if spec.container_runtime.engine is not ContainerEngine.CONTAINERD:
        yield SpecIssue(
            ("container_runtime", "engine"),
            f"Kubernetes nodes need containerd (the kubelet talks CRI to {k8s_upstream.CRI_SOCKET_CONTAINERD}; "
            f"Docker Engine is no CRI runtime since Kubernetes 1.24): set engine: containerd",
        )


def gpu_operator_rules(spec: Spec) -> Iterator[SpecIssue]:
    """One DCGM host engine per GPU.

    dcgm-exporter starts an embedded host engine unless it is pointed at a running one, and NVIDIA
    says to configure it accordingly on systems that run nv-hostengine (DCGM docs: Install DCGM
    Exporter; GPU telemetry: DCGM Exporter). gpuforge's host dcgm-exporter uses the host engine
    (``-r localhost:5555``); the operator's would start a second one next to it.
    """
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    gpu_workers = [n for n in resolve_nodes(spec) if n.has(Role.K8S_WORKER) and n.hardware.gpu is not None]
    if spec.dcgm.enabled and k.gpu_operator.dcgm_exporter is True and gpu_workers:
        yield SpecIssue(
            ("kubernetes", "gpu_operator", "dcgm_exporter"),
            "the GPU Operator's dcgm-exporter starts its own DCGM host engine, and dcgm.enabled runs nv-hostengine "
            "on the same GPUs (two host engines per GPU: profiling metrics break): set "
            "gpu_operator.dcgm_exporter: false (gpuforge runs dcgm-exporter on the host against the host engine, "
            "dcgm.exporter) or dcgm.enabled: false",
        )

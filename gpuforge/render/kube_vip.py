"""kube-vip's static pod: the API server's virtual IP on every control plane, ARP mode.

The manifest is what ``kube-vip manifest pod --interface <if> --address <VIP> --controlplane --arp
--leaderElection`` generates (``gpuforge.spec.k8s_day2.SOURCES['kube-vip-static']``), rendered here
instead of by running kube-vip's image on the node. The first control plane runs it with kubeadm's
``super-admin.conf`` until ``kubeadm init`` finished (kubeadm >= 1.29 makes ``admin.conf`` usable
only at the end of init), then with ``admin.conf`` like every other control plane.
"""

from __future__ import annotations

from typing import Any

from gpuforge.render.kubeadm import first_control_plane, kube_vip
from gpuforge.render.nvidia import dump_yaml_all
from gpuforge.spec import k8s_day2 as day2
from gpuforge.spec import k8s_upstream
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import Node


def interface(spec: Spec) -> str | None:
    """The interface the VIP is announced on (the endpoint's own, else ``kubernetes.node_interface``)."""
    ep = kube_vip(spec)
    if ep is None or spec.kubernetes is None:
        return None
    return ep.interface or spec.kubernetes.node_interface


def image(spec: Spec) -> str:
    ep = kube_vip(spec)
    return f"{day2.KUBE_VIP_IMAGE}:{ep.version if ep else day2.KUBE_VIP_DEFAULT_VERSION}"


def _env(spec: Spec) -> list[dict[str, Any]]:
    ep = kube_vip(spec)
    iface = interface(spec)
    if ep is None or iface is None:
        raise ValueError("kubernetes.api_endpoint is no kube-vip endpoint with an interface")
    lease, duration, renew, retry = day2.KUBE_VIP_LEASE
    plain = [
        ("vip_arp", "true"),
        ("port", str(k8s_upstream.API_SERVER_PORT)),
        ("vip_interface", iface),
        ("vip_subnet", "32"),
        ("cp_enable", "true"),
        ("cp_namespace", "kube-system"),
        ("vip_leaderelection", "true"),
        ("vip_leasename", lease),
        ("vip_leaseduration", str(duration)),
        ("vip_renewdeadline", str(renew)),
        ("vip_retryperiod", str(retry)),
        ("address", ep.address),
    ]
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain]
    env.insert(2, {"name": "vip_nodename", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    return env


def pod(spec: Spec, kubeconfig: str = day2.KUBE_VIP_KUBECONFIG) -> dict[str, Any]:
    """The static pod (a core v1 Pod), reading the API server with ``kubeconfig`` of the node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "containers": [
                {
                    "name": "kube-vip",
                    "image": image(spec),
                    "imagePullPolicy": "IfNotPresent",
                    "args": ["manager"],
                    "env": _env(spec),
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"], "drop": ["ALL"]}},
                    "volumeMounts": [{"name": "kubeconfig", "mountPath": day2.KUBE_VIP_KUBECONFIG}],
                }
            ],
            "hostNetwork": True,
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "volumes": [{"name": "kubeconfig", "hostPath": {"path": kubeconfig}}],
        },
    }


def manifest(spec: Spec, kubeconfig: str = day2.KUBE_VIP_KUBECONFIG) -> str:
    """/etc/kubernetes/manifests/kube-vip.yaml."""
    return dump_yaml_all([pod(spec, kubeconfig)])


def init_kubeconfig(spec: Spec) -> str:
    """The kubeconfig the first control plane's kube-vip reads during ``kubeadm init``."""
    minor = k8s_upstream.minor_of(spec.versions.kubernetes)
    return day2.KUBE_VIP_INIT_KUBECONFIG if minor >= day2.SUPER_ADMIN_SINCE else day2.KUBE_VIP_KUBECONFIG


def runs_on(spec: Spec, node: Node) -> bool:
    """kube-vip runs on every control plane when the spec's endpoint is kube-vip."""
    return kube_vip(spec) is not None and node.has(Role.K8S_CONTROL_PLANE)


def is_first(spec: Spec, node: Node) -> bool:
    first = first_control_plane(spec)
    return first is not None and first.name == node.name

"""Spec sections of a Kubernetes cluster's life after day one: the HA API endpoint, the node interface
pin, certificate renewal and etcd snapshots (imported into ``gpuforge.spec.model``'s Kubernetes section).

Facts (kube-vip's manifest, kubeadm's commands) are :mod:`gpuforge.spec.k8s_day2`. Every value is typed
for where it lands: an interface name goes into a static pod's environment and flanneld's arguments, a
directory into a systemd unit and a shell script.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator

from gpuforge.spec.k8s_day2 import KUBE_VIP_DEFAULT_VERSION
from gpuforge.spec.policy import live, rebuild
from gpuforge.spec.strict import StrictModel
from gpuforge.spec.types import HostOrIp

#: A Linux interface name as ``ip link`` takes it: IFNAMSIZ is 16 with the NUL, no '/', no space;
#: gpuforge allows letters, digits, '.', '_', '-' only (it lands in a YAML value and a shell word).
_INTERFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
#: An absolute directory on a node: letters, digits and ``._-/`` only, no ``..`` component.
_NODE_DIR = re.compile(r"/(?:[A-Za-z0-9_.-]+/?)+")


def interface_name(value: str) -> str:
    if not _INTERFACE.fullmatch(value):
        raise ValueError(f"{value!r} is not an interface name (1-15 of letters, digits, '.', '_', '-'; e.g. eth1)")
    return value


def node_directory(value: str) -> str:
    parts = value.split("/")
    if not _NODE_DIR.fullmatch(value) or ".." in parts or value == "/" or len(value) > 200:
        raise ValueError(f"{value!r} is not an absolute directory of letters, digits, '.', '_', '-' (no '..')")
    return value.rstrip("/")


InterfaceName = Annotated[str, AfterValidator(interface_name)]
NodeDirectory = Annotated[str, AfterValidator(node_directory)]


class ApiEndpoint(StrictModel):
    """The address in front of every control plane: kube-vip (a virtual IP announced in ARP mode from a
    static pod on each control plane, as kube-vip's docs for kubeadm say: the leader answers ARP for it),
    or an external one (the site's load balancer or DNS name)."""

    type: Literal["kube-vip", "external"] = rebuild(
        "external", "kube-vip (gpuforge runs it on the control planes) or external (the site's)"
    )
    address: HostOrIp = rebuild(
        description="kube-vip: the virtual IPv4 address (unused, in the control planes' subnet); external: the "
        "load balancer's name or address. kubeadm's controlPlaneEndpoint, port 6443"
    )
    interface: InterfaceName | None = live(
        None, "kube-vip: the interface the address is announced on (default: kubernetes.node_interface)"
    )
    version: str = live(
        KUBE_VIP_DEFAULT_VERSION,
        "kube-vip: its release (the static pod restarts on a change)",
        pattern=r"^v\d+\.\d+\.\d+$",
    )

    @property
    def kube_vip(self) -> bool:
        return self.type == "kube-vip"


class CertRenewal(StrictModel):
    """A daily timer on every control plane renews kubeadm's certificates (valid one year) before expiry."""

    enabled: bool = live(True, "Run the renewal timer on every control plane")
    renew_days_before: int = live(
        60, "Renew (kubeadm certs renew all, then restart the control plane pods) once a certificate has "
        "fewer days left", ge=2, le=300,
    )  # fmt: skip
    warn_days: int = live(30, "'gpuforge validate' fails a control plane whose certificates have fewer days left",
                          ge=1, le=300)  # fmt: skip


class EtcdSnapshots(StrictModel):
    """etcd snapshots on every control plane, on a schedule, the newest ``keep`` kept."""

    enabled: bool = live(True, "Take snapshots on every control plane (systemd timer)")
    schedule: Literal["hourly", "daily", "weekly"] = live("daily", "How often (systemd OnCalendar)")
    keep: int = live(7, "Snapshots kept on each control plane (older ones are removed)", ge=1, le=1000)
    directory: NodeDirectory = live("/var/backups/gpuforge/etcd", "Where on the control plane (0700)")

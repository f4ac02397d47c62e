"""kubeadm's configuration files, rendered from the spec: small pure functions, data out.

- :func:`init_config`: ``InitConfiguration`` + ``ClusterConfiguration`` + ``KubeletConfiguration``
  for ``kubeadm init --config`` on the first control plane (no secrets: kubeadm's own default
  token is never printed, ``--skip-token-print``, and expires after 24 h).
- :func:`join_config`: ``JoinConfiguration`` for ``kubeadm join --config`` (SECRET: it holds a
  bootstrap token), with the CA pinned by the hash of gpuforge's own cluster CA.
- :func:`bootstrap_token_secret`: the Secret that makes a token valid (SECRET).

Field names: kubeadm's API types (``gpuforge.spec.k8s_upstream.SOURCES['kubeadm-config-v1beta4']``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuforge.render.files import REDACTED, RenderedFile, Secrets
from gpuforge.render.nvidia import dump_yaml_all
from gpuforge.spec import k8s_upstream as facts
from gpuforge.spec.k8s_lifecycle import ApiEndpoint
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import Node, nodes_with

KUBEADM_INIT_CONFIG = "/etc/gpuforge/k8s/kubeadm-init.yaml"
#: Written only for the join itself and removed after it (0600: it holds a token).
KUBEADM_JOIN_CONFIG = "/etc/gpuforge/k8s/.kubeadm-join.yaml"
JOIN_TOKEN_MANIFEST = "/etc/gpuforge/k8s/.join-token.yaml"


def first_control_plane(spec: Spec) -> Node | None:
    planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    return planes[0] if planes else None


def endpoint_address(spec: Spec) -> str | None:
    """The address of ``kubernetes.api_endpoint`` (kube-vip's VIP or an external one)."""
    k = spec.kubernetes
    ep = k.api_endpoint if k is not None else None
    return ep.address if ep is not None else None


def kube_vip(spec: Spec) -> ApiEndpoint | None:
    """The kube-vip endpoint gpuforge runs, if the spec asks for one."""
    k = spec.kubernetes
    ep = k.api_endpoint if k is not None else None
    return ep if ep is not None and ep.kube_vip else None


def api_endpoint(spec: Spec) -> str:
    """``host:6443`` every node reaches the API server at (``kubernetes.api_endpoint`` or the
    first control plane's address)."""
    first = first_control_plane(spec)
    host = endpoint_address(spec) or (first.ssh_target if first is not None else None)
    if host is None:
        raise ValueError("no Kubernetes control plane in the spec")
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{facts.API_SERVER_PORT}"


def node_ip(spec: Spec, node: Node) -> str | None:
    """kubelet's ``--node-ip`` (k8s_day2 'kubelet-node-ip'): the node's spec address, when
    ``kubernetes.node_interface`` pins the cluster network (a spec rule makes it an IP address)."""
    k = spec.kubernetes
    if k is None or k.node_interface is None or node.address is None:
        return None
    try:
        ipaddress.ip_address(node.address)
    except ValueError:
        return None
    return node.address


def _registration(spec: Spec, node: Node) -> dict[str, Any]:
    """nodeRegistration: name, CRI socket and, with a pinned interface, kubelet's node IP (v1beta4
    lists ``{name, value}`` arguments; v1beta3 took a map)."""
    reg: dict[str, Any] = {"name": node.name, "criSocket": facts.CRI_SOCKET_CONTAINERD}
    ip = node_ip(spec, node)
    if ip is not None:
        v1beta4 = facts.kubeadm_api_version(spec.versions.kubernetes).endswith("v1beta4")
        reg["kubeletExtraArgs"] = [{"name": "node-ip", "value": ip}] if v1beta4 else {"node-ip": ip}
    return reg


def _local_endpoint(node: Node) -> dict[str, Any]:
    """The node's own API server endpoint (kubeadm detects the address where the spec gives a name)."""
    try:
        ipaddress.ip_address(node.address or "")
    except ValueError:
        return {"bindPort": facts.API_SERVER_PORT}
    return {"advertiseAddress": node.address, "bindPort": facts.API_SERVER_PORT}


def init_documents(spec: Spec, node: Node) -> list[dict[str, Any]]:
    """The three documents of ``kubeadm init --config`` on ``node`` (the first control plane)."""
    k = spec.kubernetes
    if k is None:
        raise ValueError("spec has no kubernetes section")
    version = spec.versions.kubernetes
    api = facts.kubeadm_api_version(version)
    return [
        {
            "apiVersion": api,
            "kind": "InitConfiguration",
            "nodeRegistration": _registration(spec, node),
            "localAPIEndpoint": _local_endpoint(node),
        },
        {
            "apiVersion": api,
            "kind": "ClusterConfiguration",
            "clusterName": spec.cluster.name,
            "kubernetesVersion": f"v{version}",
            "controlPlaneEndpoint": api_endpoint(spec),
            "networking": {"podSubnet": k.pod_cidr, "serviceSubnet": k.service_cidr},
        },
        # containerd runs with SystemdCgroup = true (the container-engine layer): the kubelet must match.
        {"apiVersion": facts.KUBELET_CONFIG_API, "kind": "KubeletConfiguration", "cgroupDriver": "systemd"},
    ]


def init_config(spec: Spec, node: Node) -> str:
    """/etc/gpuforge/k8s/kubeadm-init.yaml."""
    return dump_yaml_all(init_documents(spec, node))


def join_document(spec: Spec, node: Node, token: str, ca_cert_hash: str) -> dict[str, Any]:
    """``JoinConfiguration`` for ``node``: a worker, or (control-plane role) another control plane."""
    doc: dict[str, Any] = {
        "apiVersion": facts.kubeadm_api_version(spec.versions.kubernetes),
        "kind": "JoinConfiguration",
        "nodeRegistration": _registration(spec, node),
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": api_endpoint(spec),
                "token": token,
                "caCertHashes": [ca_cert_hash],
            }
        },
    }
    if node.has(Role.K8S_CONTROL_PLANE):
        doc["controlPlane"] = {"localAPIEndpoint": _local_endpoint(node)}
    return doc


def join_config(spec: Spec, node: Node, token: str, ca_cert_hash: str) -> str:
    return dump_yaml_all([join_document(spec, node, token, ca_cert_hash)])


def bootstrap_token_document(token: str, now: datetime, ttl_minutes: int = facts.TOKEN_TTL_MINUTES) -> dict[str, Any]:
    """The bootstrap-token Secret (bootstrap-tokens: Bootstrap Token Secret Format), expiring
    ``ttl_minutes`` after ``now``, in kubeadm's node group so kubeadm's RBAC lets it join."""
    token_id, token_secret = token.split(".", 1)
    expires = (now.astimezone(UTC) + timedelta(minutes=ttl_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "type": facts.TOKEN_SECRET_TYPE,
        "stringData": {
            "description": "gpuforge: joins nodes in one apply",
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expires,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": facts.TOKEN_GROUP,
        },
    }


def bootstrap_token_secret(token: str, now: datetime | None = None) -> str:
    return dump_yaml_all([bootstrap_token_document(token, now or datetime.now(UTC))])


def pki_names() -> list[str]:
    """The shared PKI's files below /etc/kubernetes/pki (kubeadm-ha: manual certificate distribution)."""
    names: list[str] = []
    for name, kind in facts.SHARED_PKI:
        names += [f"{name}.crt", f"{name}.key"] if kind == "ca" else [f"{name}.key", f"{name}.pub"]
    return sorted(names)


def pki_files(pki: Mapping[str, bytes]) -> list[RenderedFile]:
    """The shared keys as a control plane gets them (keys 0600, certificates and public key 0644).
    All are shown as secret: the set is the cluster's credentials (redacted where ``pki`` lacks one)."""
    return [
        RenderedFile(
            f"{facts.PKI_DIR}/{rel}",
            pki.get(rel, REDACTED.encode()),
            mode="0600" if rel.endswith(".key") else "0644",
            secret=True,
        )
        for rel in pki_names()
    ]


def kubeadm_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """Every kubeadm file a node gets: the shared keys on control planes, the init config on the first."""
    if spec.kubernetes is None or not node.has(Role.K8S_CONTROL_PLANE):
        return []
    files = pki_files(secrets.k8s_pki)
    first = first_control_plane(spec)
    if first is not None and first.name == node.name:
        files.append(RenderedFile(KUBEADM_INIT_CONFIG, init_config(spec, node)))
    return files

"""The JSON field names of kubeadm's config API types that gpuforge renders into (every field of
each type listed, not only the ones gpuforge uses: the ``json:"..."`` tags), per API version:

- ``kubeadm.k8s.io/v1beta4`` (kubeadm >= 1.31): kubernetes/kubernetes
  ``cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go`` at commit 017b1e4b60ca54b08b5f18a10f109ff969c697e5;
- ``kubeadm.k8s.io/v1beta3`` (kubeadm 1.22 to 1.30): kubernetes/kubernetes
  ``cmd/kubeadm/app/apis/kubeadm/v1beta3/types.go`` at commit 008b3652959ca58af8be3fb5b6ecfe9ae7638282
  (the same types, less ``dryRun`` in ``InitConfiguration`` and ``JoinConfiguration``);

and ``KubeletConfiguration.cgroupDriver`` from kubernetes/kubelet ``config/v1beta1/types.go``
(``json:"cgroupDriver,omitempty"``). A nested type is named by its Go type; :data:`NESTED` maps
(type, field) to the field's type.
"""

from __future__ import annotations

TYPE_META = {"apiVersion", "kind"}

FIELDS: dict[str, set[str]] = {
    "InitConfiguration": TYPE_META
    | {"bootstrapTokens", "dryRun", "nodeRegistration", "localAPIEndpoint", "certificateKey", "skipPhases", "patches"},
    "ClusterConfiguration": TYPE_META
    | {
        "etcd", "networking", "kubernetesVersion", "controlPlaneEndpoint", "apiServer", "controllerManager",
        "scheduler", "dns", "certificatesDir", "imageRepository", "featureGates", "clusterName",
    },
    "JoinConfiguration": TYPE_META
    | {"dryRun", "nodeRegistration", "caCertPath", "discovery", "controlPlane", "skipPhases", "patches"},
    "NodeRegistrationOptions": {
        "name", "criSocket", "taints", "kubeletExtraArgs", "ignorePreflightErrors", "imagePullPolicy",
    },
    "APIEndpoint": {"advertiseAddress", "bindPort"},
    "Networking": {"serviceSubnet", "podSubnet", "dnsDomain"},
    "JoinControlPlane": {"localAPIEndpoint", "certificateKey"},
    "Discovery": {"bootstrapToken", "file", "tlsBootstrapToken", "timeout"},
    "BootstrapTokenDiscovery": {"token", "apiServerEndpoint", "caCertHashes", "unsafeSkipCAVerification"},
}  # fmt: skip

NESTED: dict[tuple[str, str], str] = {
    ("InitConfiguration", "nodeRegistration"): "NodeRegistrationOptions",
    ("InitConfiguration", "localAPIEndpoint"): "APIEndpoint",
    ("ClusterConfiguration", "networking"): "Networking",
    ("JoinConfiguration", "nodeRegistration"): "NodeRegistrationOptions",
    ("JoinConfiguration", "discovery"): "Discovery",
    ("JoinConfiguration", "controlPlane"): "JoinControlPlane",
    ("JoinControlPlane", "localAPIEndpoint"): "APIEndpoint",
    ("Discovery", "bootstrapToken"): "BootstrapTokenDiscovery",
}

#: v1beta3: what v1beta4 added to the top-level types is not there.
FIELDS_V1BETA3: dict[str, set[str]] = {
    **FIELDS,
    "InitConfiguration": FIELDS["InitConfiguration"] - {"dryRun"},
    "JoinConfiguration": FIELDS["JoinConfiguration"] - {"dryRun"},
}
FIELDS_BY_API = {"kubeadm.k8s.io/v1beta4": FIELDS, "kubeadm.k8s.io/v1beta3": FIELDS_V1BETA3}

KUBELET_CONFIGURATION_FIELDS = TYPE_META | {"cgroupDriver"}  # the one field gpuforge sets (plus TypeMeta)


def unknown_fields(kind: str, doc: dict[str, object], api: str | None = None) -> list[str]:
    """Key paths of ``doc`` (a document of type ``kind``) that the type does not have in the
    document's own ``apiVersion`` (an unknown apiVersion is itself reported)."""
    api = api or str(doc.get("apiVersion"))
    fields = FIELDS_BY_API.get(api)
    if fields is None:
        return [f"{kind}.apiVersion={api}"]
    bad = [f"{kind}.{k}" for k in doc if k not in fields[kind]]
    for key, value in doc.items():
        nested = NESTED.get((kind, key))
        if nested is not None and isinstance(value, dict):
            bad += unknown_fields(nested, value, api)
    return bad

"""The JSON field names of kubeadm's config API types (v1beta4) that gpuforge renders into, read off
kubernetes/kubernetes ``cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go`` at commit
017b1e4b60ca54b08b5f18a10f109ff969c697e5 (the ``json:"..."`` tags; every field of each type
listed, not only the ones gpuforge uses), and ``KubeletConfiguration.cgroupDriver`` from
kubernetes/kubelet ``config/v1beta1/types.go`` (``json:"cgroupDriver,omitempty"``).

A nested type is named by its Go type; :data:`NESTED` maps (type, field) to the field's type.
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

KUBELET_CONFIGURATION_FIELDS = TYPE_META | {"cgroupDriver"}  # the one field gpuforge sets (plus TypeMeta)


def unknown_fields(kind: str, doc: dict[str, object]) -> list[str]:
    """Key paths of ``doc`` (a document of type ``kind``) that the type does not have."""
    bad = [f"{kind}.{k}" for k in doc if k not in FIELDS[kind]]
    for key, value in doc.items():
        nested = NESTED.get((kind, key))
        if nested is not None and isinstance(value, dict):
            bad += unknown_fields(nested, value)
    return bad

"""Upstream facts of the NVIDIA Network Operator (the Kubernetes path of a group's fabric): its helm
chart, the NicClusterPolicy custom resource, the RDMA shared device plugin's configuration and the
GPU Operator's GPUDirect RDMA values. One data table.

Every fact names where it came from (``SOURCES``). The spec model, its rules, the renderer, the
add-on deploy, the validator and the tests read these names; nothing about the Network Operator is
spelled anywhere else. Looked up 2026-11-26 from snapshots of the public repositories (the commits
are in each citation). The release is the newest stable tag of Mellanox/network-operator in its
snapshot (2026-08-19): v26.4.1 of 2026-07-24 (v26.1.2 of 2026-08-11 is a patch of the older 26.1
line; v26.7.0 is at rc.2).

No digest of the chart archive is recorded: NVIDIA's NGC helm repository publishes its index, but no
snapshot of it gpuforge can cite (``artifact_digests.UNPUBLISHED['network-operator']``).
"""

from __future__ import annotations

from gpuforge.spec.citation import Citation

NETWORK_OPERATOR_TAG_COMMIT = "85afd6d9c6978eb871a3292b9897f49746cc43cd"
NETWORK_OPERATOR_DOCS_COMMIT = "0c0ecad430c9281c0924fa7434a88f1380ba3d7a"
RDMA_PLUGIN_COMMIT = "410b0f3262b8df521f55dfb925637a8a28ebdda0"
NVIDIA_DOCS_COMMIT = "52dcb7b8d956784344e241df476de17094a4574c"
_TREE = "https://github.com/Mellanox/network-operator/blob/v26.4.1"

SOURCES: dict[str, Citation] = {
    "network-operator-chart": Citation(
        f"Mellanox/network-operator v26.4.1 (commit {NETWORK_OPERATOR_TAG_COMMIT}, 2026-07-24, the newest "
        "release tag) deployment/network-operator/Chart.yaml, values.yaml and README.md",
        f"{_TREE}/deployment/network-operator/values.yaml",
        "Chart.yaml 'name: network-operator', 'version: 26.4.1', 'appVersion: v26.4.1', dependencies "
        "node-feature-discovery 'condition: nfd.enabled', sriov-network-operator 'condition: "
        "sriovNetworkOperator.enabled', maintenance-operator-chart 'condition: maintenanceOperator.enabled'; "
        "values.yaml 'nfd: enabled: true', 'upgradeCRDs: true', 'sriovNetworkOperator: enabled: false', "
        "'maintenanceOperator: enabled: false' (no deployCR value: 'By default the operator is deployed without "
        "an instance of NicClusterPolicy ... The user is required to create it later'); README 'Upgrade CRDs to "
        "compatible version': 'The network-operator helm chart contains a hook(pre-install, pre-upgrade) that "
        "will automatically upgrade required CRDs in the cluster. The hook is enabled by default'",
    ),
    "network-operator-install": Citation(
        f"Mellanox/network-operator-docs docs/deployment-guide-kubernetes.rst (commit "
        f"{NETWORK_OPERATOR_DOCS_COMMIT}), 'Network Operator Deployment on Vanilla Kubernetes Cluster'",
        "https://github.com/Mellanox/network-operator-docs/blob/main/docs/deployment-guide-kubernetes.rst",
        "'helm repo add nvidia https://helm.ngc.nvidia.com/nvidia'; 'helm install network-operator "
        "nvidia/network-operator -n nvidia-network-operator --create-namespace --version <v> --wait'; 'label the "
        "namespace ... pod-security.kubernetes.io/enforce=privileged'; 'If NFD is already running in the "
        "cluster, then you must disable deploying NFD when you install the Operator. by setting nfd.enabled=false'; "
        "'Deploying NFD from either NVIDIA Network Operator or NVIDIA GPU Operator will have the correct "
        "configurations for both Operators'; 'Each Network Operator Release has a set of default version values "
        "for the various components it deploys. It is recommended that these values will not be changed'",
    ),
    "network-operator-components": Citation(
        "Mellanox/network-operator v26.4.1 hack/release.yaml and example/crs/"
        "mellanox.com_v1alpha1_nicclusterpolicy_cr.yaml",
        f"{_TREE}/hack/release.yaml",
        "'Mofed: image: doca-driver, repository: nvcr.io/nvidia/mellanox, version: doca3.4.1-26.04-1.1.0.0-1'; "
        "'RdmaSharedDevicePlugin: image: k8s-rdma-shared-dev-plugin, repository: nvcr.io/nvidia/mellanox, "
        "version: network-operator-v26.4.1'; the example NicClusterPolicy 'name: nic-cluster-policy' with "
        "ofedDriver (image, repository, version, upgradePolicy autoUpgrade/maxParallelUpgrades/drain, "
        "startupProbe, livenessProbe, readinessProbe) and rdmaSharedDevicePlugin (image, repository, version, "
        "config) of those versions",
    ),
    "nicclusterpolicy-crd": Citation(
        "Mellanox/network-operator v26.4.1 deployment/network-operator/crds/mellanox.com_nicclusterpolicies.yaml "
        "(blob 67fe6f47d80f9e3aefabf557f7bfa0073e9a5988, the same as config/crd/bases/); api/v1alpha1/"
        "nicclusterpolicy_types.go",
        f"{_TREE}/api/v1alpha1/nicclusterpolicy_types.go",
        "group mellanox.com, version v1alpha1, kind NicClusterPolicy, 'scope=Cluster'; status 'State State "
        'json:"state"\' with \'+kubebuilder:validation:Enum={"ignore", "notReady", "ready", "error"}\' '
        "('StateReady describes when reconcile has completed successfully'); 'Reason string' ('Informative "
        "string in case the observed state is error')",
    ),
    "rdma-shared-dev-plugin-config": Citation(
        f"Mellanox/k8s-rdma-shared-dev-plugin README.md (commit {RDMA_PLUGIN_COMMIT}), 'RDMA Shared Device "
        "Plugin Configurations', 'Devices Selectors'; pkg/resources/resources_manager.go validResourceName",
        "https://github.com/Mellanox/k8s-rdma-shared-dev-plugin#rdma-shared-device-plugin-configurations",
        "configList items: 'resourceName' (required; 'Should not contain special characters'; the code: "
        "'regexp.MustCompile(`^[a-zA-Z0-9_]+$`)'), 'resourcePrefix' (default \"rdma\"), 'rdmaHcaMax' (required; "
        "'Invalid value for rdmaHcaMax < 0'), 'selectors': 'vendors', 'deviceIDs', 'drivers' ('\"drivers\": "
        "[\"mlx5_core\"]'), 'ifNames' ('Target device name'), 'linkTypes' ('The link type of the net device "
        "associated with the PCI device', '\"linkTypes\": [\"ether\"]'); 'Device plugin performs logical OR "
        "between elements of a specific selector and logical AND is performed between selectors'",
    ),
    "rdma-shared-dev-plugin-devices": Citation(
        f"Mellanox/k8s-rdma-shared-dev-plugin pkg/resources/resources_manager.go DiscoverHostDevices and "
        f"pkg/resources/pci_net_device.go NewPciNetDevice (commit {RDMA_PLUGIN_COMMIT})",
        "https://github.com/Mellanox/k8s-rdma-shared-dev-plugin/blob/master/pkg/resources/pci_net_device.go",
        "'pci, err := ghw.PCI()' (the plugin discovers PCI network devices); 'linkType = link.Attrs().EncapType' "
        "(netlink's 'ether' or 'infiniband'); 'rdmaSpec := rds.Get(pciAddr)' and 'missing RDMA device spec for "
        "device' (an RDMA device is found through its PCI function: a Soft-RoCE device, bound to a netdev and "
        "not to a PCI function, is not one the plugin offers)",
    ),
    "gpu-operator-rdma": Citation(
        f"NVIDIA/cloud-native-docs gpu-operator/gpu-operator-rdma.rst (commit {NVIDIA_DOCS_COMMIT}), 'Installing "
        "the GPU Operator and Enabling GPUDirect RDMA'; NVIDIA/gpu-operator v26.7.0 deployments/gpu-operator/"
        "values.yaml 'driver: rdma: enabled: false, useHostMofed: false'",
        "https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html",
        "'To use DMA-BUF and network device drivers that are installed by the Network Operator' (no value); 'To "
        "use DMA-BUF and network device drivers that are installed on the host: --set driver.rdma.useHostMofed="
        "true'; 'To use the legacy nvidia-peermem kernel module instead of DMA-BUF, add --set driver.rdma.enabled="
        "true to either of the preceding commands'; 'the NVIDIA driver daemon set runs an init container to wait "
        "on the network device kernel drivers to be ready'; 'the nvidia-peermem-ctr container is started inside "
        "each driver pod' (the operator's driver daemon set: with a host driver these values do nothing)",
    ),
}

# --------------------------------------------------------------------------- the chart (network-operator-chart)

NETWORK_OPERATOR_DEFAULT_VERSION = "26.4.1"
NETWORK_OPERATOR_CHART = "network-operator"
NETWORK_OPERATOR_RELEASE = "network-operator"
#: NVIDIA's NGC helm repository (network-operator-install), the GPU Operator's too.
NETWORK_OPERATOR_REPO = "https://helm.ngc.nvidia.com/nvidia"
NETWORK_OPERATOR_NAMESPACE = "nvidia-network-operator"
#: The namespace label of the install guide (network-operator-install).
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce=privileged"

# --------------------------------------------------------------------------- the CR (nicclusterpolicy-crd)

NIC_POLICY_API = "mellanox.com/v1alpha1"
NIC_POLICY_KIND = "NicClusterPolicy"
NIC_POLICY_NAME = "nic-cluster-policy"
NIC_POLICY_RESOURCE = "nicclusterpolicies.mellanox.com"
STATE_READY = "ready"
STATE_ERROR = "error"


def chart_file(version: str) -> str:
    """The archive ``helm pull`` leaves: ``network-operator-<version>.tgz``."""
    return f"{NETWORK_OPERATOR_CHART}-{version}.tgz"


#: The components each release deploys, as its hack/release.yaml lists them (network-operator-components):
#: release -> component -> (image, repository, version). NVIDIA recommends keeping them unchanged.
RELEASE_COMPONENTS: dict[str, dict[str, tuple[str, str, str]]] = {
    "26.4.1": {
        "ofedDriver": ("doca-driver", "nvcr.io/nvidia/mellanox", "doca3.4.1-26.04-1.1.0.0-1"),
        "rdmaSharedDevicePlugin": ("k8s-rdma-shared-dev-plugin", "nvcr.io/nvidia/mellanox", "network-operator-v26.4.1"),
    },
}

# --------------------------------------------------------------------------- RDMA shared device plugin

#: The plugin's default resource prefix: nodes offer ``rdma/<resourceName>``.
RDMA_RESOURCE_PREFIX = "rdma"
#: The resourceName the upstream examples use.
DEFAULT_RESOURCE_NAME = "rdma_shared_device_a"
#: The upstream examples' rdmaHcaMax.
DEFAULT_RDMA_HCA_MAX = 63
#: The ``drivers`` selector of NVIDIA's ConnectX HCAs (the README's own example).
MLX5_DRIVER = "mlx5_core"
#: The ``linkTypes`` selector per fabric type (netlink's EncapType: rdma-shared-dev-plugin-devices).
LINK_TYPES = {"infiniband": "infiniband", "roce": "ether"}

# --------------------------------------------------------------------------- the GPU Operator (gpu-operator-rdma)

#: The GPU Operator chart values of GPUDirect RDMA (their keys exist in its values.yaml).
GPU_OPERATOR_RDMA_ENABLED = "enabled"
GPU_OPERATOR_RDMA_HOST_MOFED = "useHostMofed"


def rdma_resource(name: str) -> str:
    """The extended resource a node offers for the plugin's ``resourceName`` ``name``."""
    return f"{RDMA_RESOURCE_PREFIX}/{name}"

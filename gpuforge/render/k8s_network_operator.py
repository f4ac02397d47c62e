"""The NVIDIA Network Operator's files on the first control plane: the chart's values and the
NicClusterPolicy (the RDMA shared device plugin, optionally the DOCA-OFED driver container), and the
GPU Operator's GPUDirect RDMA values that go with it.

Facts are :mod:`gpuforge.spec.network_operator` (each cited there). Invariants:

* Every values key path exists in the release's own ``values.yaml`` with a value of the same kind,
  and the NicClusterPolicy validates against the release's CRD schema (both checked by the tests
  against copies of the v26.4.1 files).
* The component images are the release's own (NVIDIA: keep them unchanged); the spec picks the
  release, never an image.
* NFD runs once in the cluster: the GPU Operator's when it is installed (``nfd.enabled: false``
  here), else the Network Operator's.
* The plugin's selectors come from the groups' fabrics: their link types (``linkTypes``), and either
  the interfaces the spec names (``if_names``), the Soft-RoCE interfaces, or NVIDIA's HCA driver
  (``drivers: [mlx5_core]``). Selectors are ANDed, elements of one selector ORed (upstream's rule).
"""

from __future__ import annotations

import json
from typing import Any

from gpuforge.render.files import RenderedFile, header
from gpuforge.render.k8s_common import MANIFEST_DIR, gpu_operator_needed, kubernetes_section
from gpuforge.render.nvidia import LiteralStr, dump_yaml, dump_yaml_all
from gpuforge.spec import network_operator as no
from gpuforge.spec.model import ManagedBy, Spec
from gpuforge.spec.network_operator_rules import fabric_groups, network_operator_on

NETWORK_OPERATOR_VALUES = f"{MANIFEST_DIR}/network-operator-values.yaml"
NIC_CLUSTER_POLICY = f"{MANIFEST_DIR}/nic-cluster-policy.yaml"
#: The DOCA driver's upgrade policy and probes as the release's example NicClusterPolicy sets them
#: (network-operator-components).
OFED_UPGRADE_POLICY: dict[str, Any] = {
    "autoUpgrade": True,
    "maxParallelUpgrades": 1,
    "drain": {"enable": True, "force": True, "deleteEmptyDir": True, "timeoutSeconds": 300},
}
OFED_PROBES: dict[str, dict[str, int]] = {
    "startupProbe": {"initialDelaySeconds": 10, "periodSeconds": 10},
    "livenessProbe": {"initialDelaySeconds": 30, "periodSeconds": 30},
    "readinessProbe": {"initialDelaySeconds": 10, "periodSeconds": 30},
}


def network_operator_values(spec: Spec) -> dict[str, Any]:
    """Overrides of the network-operator chart's values (network_operator 'network-operator-chart',
    'network-operator-install'): NFD only without the GPU Operator's, the SR-IOV and maintenance
    operators off, the chart's CRD upgrade hook on (so ``helm upgrade`` brings the release's CRDs)."""
    return {
        "nfd": {"enabled": not gpu_operator_needed(spec)},
        "upgradeCRDs": True,
        "sriovNetworkOperator": {"enabled": False},
        "maintenanceOperator": {"enabled": False},
    }


def selectors(spec: Spec) -> dict[str, list[str]]:
    """The device plugin's selectors for the groups' fabrics (network_operator 'rdma-shared-dev-plugin-config';
    link types as netlink names them, 'rdma-shared-dev-plugin-devices')."""
    op = kubernetes_section(spec).network_operator
    fabrics = [g.fabric for g in fabric_groups(spec) if g.fabric is not None]
    out: dict[str, list[str]] = {"linkTypes": sorted({no.LINK_TYPES[f.type.value] for f in fabrics})}
    soft = sorted({n for f in fabrics for n in f.soft_roce})
    if op.if_names:
        out["ifNames"] = list(op.if_names)
    elif soft:
        out["ifNames"] = soft
    else:
        out["drivers"] = [no.MLX5_DRIVER]
    return out


def plugin_config(spec: Spec) -> dict[str, Any]:
    """The RDMA shared device plugin's configuration: one resource over the selected HCAs."""
    op = kubernetes_section(spec).network_operator
    return {
        "configList": [{"resourceName": op.resource_name, "rdmaHcaMax": op.rdma_hca_max, "selectors": selectors(spec)}]
    }


def _image(version: str, component: str) -> dict[str, str]:
    image, repository, tag = no.RELEASE_COMPONENTS[version][component]
    return {"image": image, "repository": repository, "version": tag}


def nic_cluster_policy(spec: Spec) -> dict[str, Any]:
    """The NicClusterPolicy (network_operator 'nicclusterpolicy-crd', 'network-operator-components'): the
    RDMA shared device plugin, and the DOCA-OFED driver container with ``ofed_driver``."""
    op = kubernetes_section(spec).network_operator
    body: dict[str, Any] = {}
    if op.ofed_driver:
        body["ofedDriver"] = {
            **_image(op.version, "ofedDriver"),
            "upgradePolicy": json.loads(json.dumps(OFED_UPGRADE_POLICY)),
            **{k: dict(v) for k, v in OFED_PROBES.items()},
        }
    body["rdmaSharedDevicePlugin"] = {
        **_image(op.version, "rdmaSharedDevicePlugin"),
        "config": LiteralStr(json.dumps(plugin_config(spec), indent=2) + "\n"),
    }
    return {
        "apiVersion": no.NIC_POLICY_API,
        "kind": no.NIC_POLICY_KIND,
        "metadata": {"name": no.NIC_POLICY_NAME},
        "spec": body,
    }


def gpu_operator_rdma(spec: Spec) -> dict[str, Any]:
    """The GPU Operator's ``driver.rdma`` values (network_operator 'gpu-operator-rdma'): with the Network
    Operator on and the operator's own driver, nvidia-peermem from its driver pods (``enabled``, else
    DMA-BUF) and ``useHostMofed`` when the host's RDMA stack serves (no driver container); empty
    otherwise (the values act on the operator's driver daemon set only)."""
    k = kubernetes_section(spec)
    if not network_operator_on(spec) or k.gpu_operator.driver is not ManagedBy.OPERATOR:
        return {}
    op = k.network_operator
    return {"rdma": {no.GPU_OPERATOR_RDMA_ENABLED: op.peermem, no.GPU_OPERATOR_RDMA_HOST_MOFED: not op.ofed_driver}}


def network_operator_files(spec: Spec) -> list[RenderedFile]:
    """The chart's values and the NicClusterPolicy (first control plane), when the operator is on."""
    if not network_operator_on(spec):
        return []
    return [
        RenderedFile(NETWORK_OPERATOR_VALUES, header() + dump_yaml(network_operator_values(spec))),
        RenderedFile(NIC_CLUSTER_POLICY, header() + dump_yaml_all([nic_cluster_policy(spec)])),
    ]

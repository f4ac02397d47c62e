"""The spec's ``kubernetes.network_operator`` section: the NVIDIA Network Operator with the RDMA shared
device plugin, the Kubernetes path of the node groups' ``fabric`` (imported into
``gpuforge.spec.k8s_model``).

Facts (chart, CR, component images, the plugin's configuration) are
:mod:`gpuforge.spec.network_operator`; cross-field rules :mod:`gpuforge.spec.network_operator_rules`.
Every value is typed for where it lands: the version in a helm argument and an archive name, the
namespace in helm's ``--namespace`` and kubectl's ``-n``, the resource name in the plugin's JSON
configuration and a node's extended resource ``rdma/<name>``, interface names in the plugin's
``ifNames`` selector.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, field_validator

from gpuforge.spec.fabric import NetdevName
from gpuforge.spec.k8s_addons_model import CHART_VERSION, NAMESPACE
from gpuforge.spec.network_operator import (
    DEFAULT_RDMA_HCA_MAX,
    DEFAULT_RESOURCE_NAME,
    NETWORK_OPERATOR_DEFAULT_VERSION,
    NETWORK_OPERATOR_NAMESPACE,
)
from gpuforge.spec.policy import live, rebuild, rolling
from gpuforge.spec.strict import StrictModel

#: The plugin's resourceName (``^[a-zA-Z0-9_]+$``: 'rdma-shared-dev-plugin-config') that is also the
#: name part of a Kubernetes extended resource (a qualified name: 63 characters, alphanumeric at each end).
RESOURCE_NAME = r"^[A-Za-z0-9]([A-Za-z0-9_]{0,61}[A-Za-z0-9])?$"


def _resource_name(value: str) -> str:
    if not re.fullmatch(RESOURCE_NAME, value):
        raise ValueError(
            f"{value!r} is not an RDMA resource name: letters, digits and '_' (the device plugin's rule), 63 at "
            "most, a letter or digit at each end (a Kubernetes resource name's)"
        )
    return value


RdmaResourceName = Annotated[str, AfterValidator(_resource_name)]


class NetworkOperator(StrictModel):
    """The NVIDIA Network Operator (helm chart network-operator from NVIDIA's NGC repository) and its
    NicClusterPolicy: the RDMA shared device plugin offers the groups' HCAs to pods as the extended
    resource ``rdma/<resource_name>``; optionally the DOCA-OFED driver container. Installed from the
    first control plane after the GPU Operator (whose NFD it shares)."""

    enabled: bool | None = live(
        None,
        "Install the Network Operator and its NicClusterPolicy; default: on when a node group with a "
        "Kubernetes role declares a fabric",
    )
    version: str = rolling(
        NETWORK_OPERATOR_DEFAULT_VERSION,
        "Chart release (gpuforge knows the component images of 26.4.1); its archive is used only with its "
        "sha256 pinned in sources.artifact_sha256 (network-operator-<version>.tgz: NGC publishes none "
        "gpuforge can cite)",
        pattern=CHART_VERSION,
    )
    namespace: str = rebuild(NETWORK_OPERATOR_NAMESPACE, "Namespace of the operator", pattern=NAMESPACE)
    resource_name: RdmaResourceName = live(
        DEFAULT_RESOURCE_NAME, "Name of the RDMA resource: pods request rdma/<resource_name>"
    )
    rdma_hca_max: int = live(
        DEFAULT_RDMA_HCA_MAX, "Pods that may share one HCA at once (the device plugin's rdmaHcaMax)", ge=1, le=65535
    )
    if_names: list[NetdevName] = live(
        default_factory=list,
        description="Network interfaces whose HCAs the plugin offers (its ifNames selector); default: every "
        "mlx5_core HCA of the fabrics' link types, or the Soft-RoCE interfaces. Required when a group lists "
        "its hcas (the plugin selects by interface, not by RDMA device name)",
    )
    ofed_driver: bool = rolling(
        False,
        "Deploy the DOCA-OFED driver container of the release (spec.ofedDriver) on the HCA nodes; only when "
        "every Kubernetes group's fabric has stack: doca. Off: the host's RDMA stack (the fabric layer) serves",
    )
    peermem: bool = rolling(
        True,
        "With the GPU Operator's driver (gpu_operator.driver: operator): load nvidia-peermem from its driver "
        "pods (driver.rdma.enabled); off: GPUDirect RDMA through DMA-BUF. With a host driver, the fabric's "
        "peermem setting serves",
    )
    wait_minutes: int = live(
        15, "How long 'gpuforge apply' waits for the NicClusterPolicy to report state ready", ge=1, le=240
    )

    @field_validator("if_names")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("an interface is listed more than once")
        return v

"""The ``fabric`` section of a node's health config: what the node-local fabric checks expect.

A pure function of the spec and the node (``None`` for a node whose group declares no fabric, so
its fabric checks are skipped). The devices expected are the group's ``hcas`` list (RDMA device
names as in ``/sys/class/infiniband``) plus one ``rxe_<netdev>`` per Soft-RoCE netdev; an empty
list with ``all`` true means "every RDMA device the node has, at least one".
"""

from __future__ import annotations

from typing import Any

from gpuforge.render.fabric import fabric_modules, gpu_fabric
from gpuforge.spec import fabric_packages as table
from gpuforge.spec.fabric import Fabric, FabricType, soft_roce_device
from gpuforge.spec.fabric_rules import fabric_of
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node

#: ``fabric.type`` -> the ``link_layer`` its ports show in sysfs (``link_layer_show``: "InfiniBand", "Ethernet").
LINK_LAYER = {FabricType.INFINIBAND: "InfiniBand", FabricType.ROCE: "Ethernet"}


def expected_devices(fabric: Fabric) -> tuple[list[str], bool]:
    """(device names the node must have, whether ``hcas`` is ``all``)."""
    every = fabric.hcas == "all"
    names = [] if isinstance(fabric.hcas, str) else list(fabric.hcas)
    names += [soft_roce_device(n) for n in fabric.soft_roce if soft_roce_device(n) not in names]
    return names, every


def fabric_health_config(spec: Spec, node: Node) -> dict[str, Any] | None:
    """The node's ``fabric`` health section, or None where its group declares no fabric."""
    fabric = fabric_of(spec, node)
    if fabric is None:
        return None
    devices, every = expected_devices(fabric)
    gpus = gpu_fabric(spec, node)
    return {
        "type": fabric.type.value,
        "link_layer": LINK_LAYER[fabric.type],
        "devices": devices,
        "all": every,
        "link_rate_gbps": fabric.link_rate_gbps,
        "firmware": fabric.firmware,
        "peermem": fabric.peermem and gpus,
        # The modules the fabric layer loads; nvidia_peermem is fabric.peermem's own check.
        "modules": [m for m in fabric_modules(spec, node, fabric) if m != table.PEERMEM_MODULE],
    }

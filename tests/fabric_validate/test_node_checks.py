"""The node-local fabric checks on recorded sysfs and nvidia-smi outputs, with the health config the spec renders."""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.render.health import health_config
from gpuforge.render.health_fabric import fabric_health_config
from gpuforge.validator.node import execute
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP
from gpuforge.validator.node.checks_fabric import NO_FABRIC, PORTS_DATA
from gpuforge.validator.node.framework import Result
from tests.fabric_validate.helpers import ROCE, fabric_lab, fact_output, node, spec_of
from tests.validator.vhelpers import StrictContext, driver_lines, output

FABRIC_CHECKS = ["fabric.devices", "fabric.ports", "fabric.firmware", "fabric.modules", "fabric.peermem",
                 "fabric.affinity"]  # fmt: skip


def cfg_for(fabric: dict[str, Any] | None, gpu: bool = False, name: str = "node2") -> dict[str, Any]:
    """The health config the renderer writes for ``name`` of a lab with that fabric."""
    spec = spec_of(fabric_lab(fabric, gpu=gpu))
    cfg = health_config(spec, node(spec, name), [])
    assert cfg["fabric"] == fabric_health_config(spec, node(spec, name))
    return cfg


def run(cfg: dict[str, Any], **outputs: list[str]) -> tuple[dict[str, Result], dict[str, Any]]:
    """The fabric checks (and driver.module, fabric.peermem's dependency) on these outputs only."""
    outputs.setdefault("lspci", output("nvidia/pci_no_nvidia_device"))
    ctx = StrictContext(cfg, outputs)
    results, ctx = execute.run_node_checks(cfg, FABRIC_CHECKS, ctx=ctx)
    return {r.id: r for r in results}, ctx.data


def test_a_group_without_fabric_skips_every_fabric_check_and_reads_no_fabric_probe() -> None:
    cfg = cfg_for(None)
    assert cfg["fabric"] is None
    got, data = run(cfg)  # StrictContext: neither rdma nor topo may be read
    assert {got[c].status for c in FABRIC_CHECKS} == {SKIP}
    assert got["fabric.devices"].message == NO_FABRIC and data == {}


def test_soft_roce_device_present_active_and_its_rocev2_ipv4_gid_chosen() -> None:
    cfg = cfg_for({**ROCE, "soft_roce": [], "hcas": ["rxe0"], "link_rate_gbps": 10})
    got, data = run(cfg, rdma=fact_output("rdma_rxe_softroce_vm"))
    assert got["fabric.devices"].status == PASS, got["fabric.devices"].message
    assert got["fabric.ports"].status == PASS
    assert got["fabric.ports"].message == "rxe0 port 1 ACTIVE Ethernet 10 Gb/sec (1X FDR10), GID 1 10.0.0.1"
    assert data[PORTS_DATA] == {"rxe0": {"port": 1, "gid_index": 1, "ipv4": "10.0.0.1", "netdev": "enp2s0",
                                         "link_layer": "Ethernet", "rate_gbps": 10.0}}  # fmt: skip
    assert got["fabric.modules"].status == PASS and got["fabric.modules"].message == "ib_uverbs live, rdma_ucm live"
    assert got["fabric.firmware"].message == "the spec pins no HCA firmware"
    assert got["fabric.peermem"].status == got["fabric.affinity"].status == SKIP


def test_missing_soft_roce_device_and_module_are_named() -> None:
    got, _ = run(cfg_for(ROCE), rdma=fact_output("rdma_mlx4_infiniband_fdr"))
    assert got["fabric.devices"].status == FAIL
    assert got["fabric.devices"].message == (
        "RDMA device(s) rxe_eth1 missing (rxe_eth1: Soft-RoCE device(s) of netdev eth1); the node has: mlx4_0"
    )
    assert got["fabric.ports"].status == BLOCKED
    assert got["fabric.modules"].message == "kernel module(s) not loaded: rdma_rxe (absent)"


def test_no_rdma_core_on_the_node() -> None:
    got, _ = run(cfg_for(ROCE), rdma=fact_output("rdma_class_absent_build_machine"))
    assert got["fabric.devices"].status == FAIL and "no /sys/class/infiniband" in got["fabric.devices"].message
    assert got["fabric.modules"].message == (
        "kernel module(s) not loaded: ib_uverbs (absent), rdma_ucm (absent), rdma_rxe (absent)"
    )


def test_unreadable_sysfs_fails_and_says_why() -> None:
    got, _ = run(cfg_for({"type": "roce"}), rdma=fact_output("rdma_unreadable"))
    assert got["fabric.devices"].status == FAIL
    assert got["fabric.devices"].message == "cannot read the RDMA devices: reading sysfs took longer than 8 s"


@pytest.mark.parametrize(
    ("fabric", "status", "message"),
    [
        ({"type": "infiniband"}, PASS, "mlx4_0 port 1 ACTIVE InfiniBand 56 Gb/sec (4X FDR)"),
        ({"type": "infiniband", "link_rate_gbps": 100}, FAIL,
         "mlx4_0: port 1: rate 56 Gb/sec (4X FDR), below the spec's 100 Gb/s"),
        ({"type": "roce"}, FAIL, "mlx4_0: port 1: link layer InfiniBand, the spec's fabric needs Ethernet"),
    ],
)  # fmt: skip
def test_ports_judge_link_layer_and_rate(fabric: dict[str, Any], status: str, message: str) -> None:
    got, data = run(cfg_for(fabric), rdma=fact_output("rdma_mlx4_infiniband_fdr"))
    assert (got["fabric.ports"].status, got["fabric.ports"].message) == (status, message)
    if status == PASS:
        assert data[PORTS_DATA]["mlx4_0"]["gid_index"] == 0


def test_a_port_down_is_reported_with_its_physical_state() -> None:
    lines = [x.replace("4: ACTIVE", "1: DOWN").replace("5: LinkUp", "3: Disabled")
             for x in fact_output("rdma_mlx4_infiniband_fdr")]  # fmt: skip
    got, data = run(cfg_for({"type": "infiniband"}), rdma=lines)
    assert got["fabric.ports"].message == "mlx4_0: port 1: state DOWN (Disabled)"
    assert data[PORTS_DATA] == {}


@pytest.mark.parametrize(
    ("pin", "status", "message"),
    [("2.42.5000", PASS, "firmware 2.42.5000 on mlx4_0, as pinned"),
     ("2.42.5004", FAIL, "firmware mlx4_0 2.42.5000; the spec pins 2.42.5004")],
)  # fmt: skip
def test_firmware_as_pinned(pin: str, status: str, message: str) -> None:
    got, _ = run(cfg_for({"type": "infiniband", "firmware": pin}), rdma=fact_output("rdma_mlx4_infiniband_fdr"))
    assert (got["fabric.firmware"].status, got["fabric.firmware"].message) == (status, message)


def test_soft_roce_has_no_firmware_to_pin() -> None:
    got, _ = run(
        cfg_for({"type": "roce", "hcas": ["rxe0"], "firmware": "1.2.3"}), rdma=fact_output("rdma_rxe_softroce_vm")
    )
    assert (got["fabric.firmware"].status, got["fabric.firmware"].message) == (
        SKIP,
        "only software RDMA devices (Soft-RoCE): they have no firmware",
    )


def gpu_outputs(rdma: list[str], topo: list[str]) -> dict[str, list[str]]:
    return {"rdma": rdma, "topo": topo, "driver": driver_lines(), "lspci": output("nvidia/pci_hgx_h100_8gpu_4nvswitch")}


def test_peermem_on_gpu_nodes() -> None:
    cfg = cfg_for({"type": "infiniband", "peermem": True}, gpu=True)
    assert cfg["fabric"]["peermem"] is True
    rdma = fact_output("rdma_mlx4_infiniband_fdr")
    topo = fact_output("gpu_nic_topology_8gpu_ten_nics_legend")
    got, _ = run(cfg, **gpu_outputs(rdma, topo))
    assert got["fabric.peermem"].message == "nvidia_peermem is not loaded (absent): GPUDirect RDMA is off"
    loaded = [x.replace("nvidia_peermem absent", "nvidia_peermem live") for x in rdma]
    got, _ = run(cfg, **gpu_outputs(loaded, topo))
    assert (got["fabric.peermem"].status, got["fabric.peermem"].message) == (PASS, "nvidia_peermem live")


def test_affinity_on_a_real_topology() -> None:
    """The recorded server: GPUs pair with mlx5_0..7 over PXB; mlx5_8/9 hang off another socket (SYS for all)."""
    topo = fact_output("gpu_nic_topology_8gpu_ten_nics_legend")
    rdma = fact_output("rdma_mlx4_infiniband_fdr")
    near = cfg_for({"type": "infiniband", "hcas": [f"mlx5_{i}" for i in range(8)]}, gpu=True)
    got, _ = run(near, **gpu_outputs(rdma, topo))
    assert got["fabric.affinity"].status == PASS
    assert got["fabric.affinity"].message.startswith("each of 8 GPU(s) has a near NIC: GPU0 mlx5_0 (PXB), GPU1 mlx5_0")
    far = cfg_for({"type": "infiniband", "hcas": ["mlx5_8", "mlx5_9"]}, gpu=True)
    got, _ = run(far, **gpu_outputs(rdma, topo))
    assert (got["fabric.affinity"].status, got["fabric.affinity"].severity) == (FAIL, "warning")
    assert got["fabric.affinity"].message.startswith(
        "8 GPU(s) without a near fabric NIC (only SYS, across NUMA nodes): GPU0 (mlx5_8 SYS, mlx5_9 SYS); GPU1"
    )


def test_affinity_skips_when_it_cannot_judge() -> None:
    rdma = fact_output("rdma_mlx4_infiniband_fdr")
    cfg = cfg_for({"type": "infiniband"}, gpu=True)
    got, _ = run(cfg, **gpu_outputs(rdma, fact_output("gpu_nic_topology_missing")))
    assert got["fabric.affinity"].status == SKIP
    assert got["fabric.affinity"].message.startswith("nvidia-smi topo -m not readable (nvidia-smi not found")
    soft = cfg_for({"type": "roce", "soft_roce": ["eth1"]}, gpu=True)
    got, _ = run(soft, **gpu_outputs(rdma, fact_output("gpu_nic_topology_8gpu_ten_nics_legend")))
    assert (
        got["fabric.affinity"].message
        == "the fabric's devices are software ones (Soft-RoCE: no PCI location to compare)"
    )

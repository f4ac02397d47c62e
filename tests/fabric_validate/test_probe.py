"""The fabric readings: the shell command and the node program's in-process reader print the same lines
for the same sysfs tree, and the parser reads them (a fake tree under tmp_path, laid out as the kernel's)."""

from __future__ import annotations

import os
from pathlib import Path

from gpuforge.probes import fabric
from gpuforge.validator.node.inputs import RDMA, run_shell
from tests.fabric_validate.helpers import fact_output


def put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def sysfs(tmp_path: Path) -> tuple[Path, Path]:
    """/sys/class/infiniband with a ConnectX (PCI parent, netdev, RoCE GIDs) and a Soft-RoCE device (no
    ``device`` link), an unreadable attribute, and /sys/module with a live, a built-in and an absent module."""
    ib, mods = tmp_path / "class" / "infiniband", tmp_path / "module"
    pci = tmp_path / "devices" / "0000:17:00.0"
    (pci / "net" / "ens1f0np0").mkdir(parents=True)
    mlx = ib / "mlx5_0"
    mlx.mkdir(parents=True)
    os.symlink(pci, mlx / "device")
    put(mlx / "node_type", "1: CA")
    put(mlx / "fw_ver", "28.39.1002")
    port = mlx / "ports" / "1"
    for name, value in {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "100 Gb/sec (2X HDR)",
                        "link_layer": "Ethernet"}.items():  # fmt: skip
        put(port / name, value)
    gids = {0: ("fe80:0000:0000:0000:0a5c:2cff:fe11:2233", "IB/RoCE v1"),
            1: ("fe80:0000:0000:0000:0a5c:2cff:fe11:2233", "RoCE v2"),
            2: ("0000:0000:0000:0000:0000:ffff:0a0a:0b0c", "IB/RoCE v1"),
            3: ("0000:0000:0000:0000:0000:ffff:0a0a:0b0c", "RoCE v2"),
            4: ("0000:0000:0000:0000:0000:0000:0000:0000", "")}  # fmt: skip
    for i, (gid, kind) in gids.items():
        put(port / "gids" / str(i), gid)
        put(port / "gid_attrs" / "types" / str(i), kind)
        put(port / "gid_attrs" / "ndevs" / str(i), "ens1f0np0")
    (port / "gids" / "5").mkdir()  # a read that fails: skipped by both
    rxe = ib / "rxe_eth1" / "ports" / "1"
    put(ib / "rxe_eth1" / "node_type", "1: CA")
    for name, value in {"state": "1: DOWN", "phys_state": "3: Disabled", "link_layer": "Ethernet"}.items():
        put(rxe / name, value)
    (rxe / "rate").mkdir()  # unreadable attribute: no line from either
    put(mods / "ib_uverbs" / "initstate", "live")
    (mods / "ib_core" / "parameters").mkdir(parents=True)  # built in: a folder, no initstate
    return ib, mods


def test_shell_command_and_in_process_reader_agree(tmp_path: Path) -> None:
    ib, mods = sysfs(tmp_path)
    local = fabric.read_rdma(str(ib), str(mods), ["gdrdrv", "bad name;rm"])
    assert run_shell(fabric.rdma_command(str(ib), str(mods), ["gdrdrv", "bad name;rm"]), 10) == local
    info = fabric.parse_rdma(local)
    mlx, soft = info["devices"]
    assert (mlx["name"], mlx["fw_ver"], mlx["netdevs"]) == ("mlx5_0", "28.39.1002", ["ens1f0np0"])
    port = mlx["ports"][0]
    assert (port["state"], port["phys_state"], port["rate_gbps"], port["link_layer"]) == ("ACTIVE", "LinkUp", 100.0,
                                                                                          "Ethernet")  # fmt: skip
    assert [(g["index"], g["type"], g["ipv4"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1", None), (1, "RoCE v2", None), (2, "IB/RoCE v1", "10.10.11.12"), (3, "RoCE v2", "10.10.11.12")
    ]  # fmt: skip
    assert (soft["name"], soft["netdevs"], soft["ports"][0]["rate"], soft["ports"][0]["state"]) == (
        "rxe_eth1",
        [],
        None,
        "DOWN",
    )
    assert info["modules"]["ib_uverbs"] == "live" and info["modules"]["ib_core"] == "builtin"
    assert info["modules"]["gdrdrv"] == "absent" and "bad name;rm" not in info["modules"]


def test_the_node_program_reads_the_modules_the_config_names() -> None:
    cfg = {"fabric": {"modules": ["ib_uverbs", "gdrdrv", "ib_ipoib"]}}
    assert RDMA.args(cfg)[2] == ["ib_uverbs", "gdrdrv", "ib_ipoib"]
    assert "for m in ib_core ib_uverbs rdma_ucm ib_ipoib mlx5_ib rdma_rxe nvidia_peermem gdrdrv;" in (
        RDMA.reading.command(*RDMA.args(cfg))
    )


def test_no_rdma_class_on_this_kind_of_machine(tmp_path: Path) -> None:
    lines = fabric.read_rdma(str(tmp_path / "none"), str(tmp_path / "none"))
    assert lines == fact_output("rdma_class_absent_build_machine")


def test_topology_reading_is_nvidia_smis_own_command() -> None:
    """The node program reads ``nvidia-smi topo -m`` once (the ``topo`` input) and parses it both ways."""
    from gpuforge.probes.nvidia_smi import GPU_TOPOLOGY

    assert fabric.GPU_NIC_TOPOLOGY.command() == GPU_TOPOLOGY.command()
    topo = fabric.parse_gpu_nic_topology(fact_output("gpu_nic_topology_8gpu_ten_nics_legend"))
    assert topo["affinity"]["GPU7"]["mlx5_7"] == "PXB" and topo["affinity"]["GPU7"]["mlx5_9"] == "SYS"
    assert fabric.ipv4_of("0000:0000:0000:0000:0000:ffff:0a00:0001") == "10.0.0.1"
    assert fabric.ipv4_of("fe80:0000:0000:0000:5054:00ff:fe95:c80e") is None

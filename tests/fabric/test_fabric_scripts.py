"""The fabric's node scripts run through a real shell with stub tools (``rdma``, ``modprobe``,
``mlnx_qos``, ``enroot-mount``) over a scratch sysfs: what they do, and that a second run does nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuforge.render.fabric import enroot_hook, roce_qos_script, soft_roce_script
from tests.fabric.conftest import FINGERPRINT, data, group, spec_of

#: ``rdma link add NAME ...`` makes the device's sysfs directory, ``rdma link delete NAME`` removes it,
#: as the kernel does; a netdev named ``missing`` fails as rdma does for an unknown interface.
RDMA_STUB = """#!/bin/sh
echo "rdma $*" >> "$LOG"
case "$1 $2" in
  "link add") [ "$7" = missing ] && { echo "error: netdev missing" >&2; exit 1; }
              mkdir -p "$SYSFS_ROOT/class/infiniband/$3" ;;
  "link delete") rmdir "$SYSFS_ROOT/class/infiniband/$3" ;;
esac
"""
LOGGING_STUB = '#!/bin/sh\necho "$(basename "$0") $*" >> "$LOG"\n'


@pytest.fixture
def node(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("rdma", RDMA_STUB), ("modprobe", LOGGING_STUB), ("mlnx_qos", LOGGING_STUB)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    sysfs = tmp_path / "sys"
    (sysfs / "class" / "infiniband").mkdir(parents=True)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SYSFS_ROOT": str(sysfs), "LOG": str(tmp_path / "log")}


def run(script: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "script"
    path.write_text(script)
    path.chmod(0o755)
    return subprocess.run([str(path)], env=env, capture_output=True, text=True, timeout=30)


def log(env: dict[str, str]) -> list[str]:
    p = Path(env["LOG"])
    lines = p.read_text().splitlines() if p.exists() else []
    p.unlink(missing_ok=True)
    return lines


def soft_roce(netdevs: list[str]) -> str:
    d = data()
    group(d, "cpu")["fabric"]["soft_roce"] = netdevs
    fabric = spec_of(d).node_groups[2].fabric
    assert fabric is not None
    return soft_roce_script(fabric)


def test_soft_roce_makes_each_device_once_and_removes_the_ones_the_spec_dropped(
    node: dict[str, str], tmp_path: Path
) -> None:
    infiniband = Path(node["SYSFS_ROOT"]) / "class" / "infiniband"
    (infiniband / "rxe_old").mkdir()  # made by an earlier spec
    (infiniband / "mlx5_0").mkdir()  # a real HCA: never touched
    (infiniband / "rxe0").mkdir()  # made by hand, not gpuforge's name: never touched
    res = run(soft_roce(["eth1", "eth2"]), node, tmp_path)
    assert res.returncode == 0, res.stderr
    assert log(node) == [
        "modprobe rdma_rxe",
        "rdma link delete rxe_old",
        "rdma link add rxe_eth1 type rxe netdev eth1",
        "rdma link add rxe_eth2 type rxe netdev eth2",
    ]
    assert sorted(p.name for p in infiniband.iterdir()) == ["mlx5_0", "rxe0", "rxe_eth1", "rxe_eth2"]
    again = run(soft_roce(["eth1", "eth2"]), node, tmp_path)
    assert again.returncode == 0 and log(node) == ["modprobe rdma_rxe"]
    assert "gpuforge: rxe_eth1 exists" in again.stdout


def test_soft_roce_fails_when_its_interface_is_missing(node: dict[str, str], tmp_path: Path) -> None:
    res = run(soft_roce(["missing"]), node, tmp_path)
    assert res.returncode != 0 and "netdev missing" in res.stderr


def test_roce_qos_sets_each_hca_interface(node: dict[str, str], tmp_path: Path) -> None:
    sysfs = Path(node["SYSFS_ROOT"])
    for hca, netdev in (("mlx5_0", "ens1f0"), ("mlx5_1", "ens1f1"), ("rxe_eth1", "eth1")):
        (sysfs / "class" / "infiniband" / hca / "device" / "net" / netdev).mkdir(parents=True)
        for point in ("roce_np", "roce_rp"):
            enable = sysfs / "class" / "net" / netdev / "ecn" / point / "enable"
            enable.mkdir(parents=True)
            (enable / "3").write_text("0\n")
    d = data()
    group(d, "cpu")["fabric"].update(
        stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT, roce={"trust": "dscp", "pfc": [3]}
    )
    fabric = spec_of(d).node_groups[2].fabric
    assert fabric is not None
    res = run(roce_qos_script(fabric), node, tmp_path)
    assert res.returncode == 0, res.stderr
    assert log(node) == [
        "mlnx_qos -i ens1f0 --trust dscp",
        "mlnx_qos -i ens1f0 --pfc 0,0,0,1,0,0,0,0",
        "mlnx_qos -i ens1f1 --trust dscp",
        "mlnx_qos -i ens1f1 --pfc 0,0,0,1,0,0,0,0",
    ]  # rxe_eth1 (Soft-RoCE) has no QoS of its own: left out with hcas: all
    for netdev, want in (("ens1f0", "1"), ("ens1f1", "1"), ("eth1", "0")):
        for point in ("roce_np", "roce_rp"):
            assert (sysfs / "class" / "net" / netdev / "ecn" / point / "enable" / "3").read_text().strip() == want


def test_enroot_hook_stands_aside_without_devices_or_with_mellanox_selection(tmp_path: Path) -> None:
    stub = tmp_path / "bin" / "enroot-mount"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "enroot-mount $* $(cat)" >> "$LOG"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{stub.parent}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"), "ENROOT_ROOTFS": "/rootfs"}
    has_ib = Path("/dev/infiniband").is_dir()
    res = run(enroot_hook(), {**env, "MELLANOX_VISIBLE_DEVICES": "0"}, tmp_path)
    assert res.returncode == 0 and log(env) == []
    res = run(enroot_hook(), env, tmp_path)
    assert res.returncode == 0
    want = ["enroot-mount --root /rootfs - /dev/infiniband /dev/infiniband none "
            "x-create=dir,rbind,rw,nosuid,noexec,private"]  # fmt: skip
    assert log(env) == (want if has_ib else [])

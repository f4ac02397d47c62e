"""The fabric layer's files as rendered, the cited data table's rows, and Slurm's MpiDefault."""

from __future__ import annotations

import pytest

from gpuforge.render import render_node
from gpuforge.render.fabric import (
    DOCA_LIST,
    DOCA_REPO_FILE,
    ENROOT_HOOK,
    IPOIB_NETWORK,
    MODULES_FILE,
    NCCL_PIN,
    ROCE_QOS_SCRIPT,
    SOFT_ROCE_SCRIPT,
    doca_repo,
    fabric_files,
    pfc_bits,
)
from gpuforge.render.slurm import slurm_conf
from gpuforge.spec import fabric_packages as table
from gpuforge.spec.errors import SpecError
from gpuforge.spec.platforms import Arch, OsFamily, platform_for
from tests.fabric.conftest import FINGERPRINT, data, group, node_of, spec_of
from tests.helpers import jammy_data

HEADER = "# Managed by gpuforge: edit the cluster spec, not this file.\n"


def files_of(d: dict, name: str) -> dict[str, str]:
    spec = spec_of(d)
    return {f.path: f.data.decode() for f in fabric_files(spec, node_of(spec, name))}


def test_a_node_without_fabric_gets_nothing_and_slurm_gets_pmix_only_with_openmpi() -> None:
    d = data()
    assert files_of(d, "ctl1") == {}
    assert "\nMpiDefault=pmix\n" in slurm_conf(spec_of(d))
    for g in ("gpu", "cpu"):
        group(d, g)["fabric"]["mpi"] = "none"
    assert "MpiDefault" not in slurm_conf(spec_of(d))
    group(d, "gpu")["fabric"]["mpi"] = "openmpi"
    group(d, "gpu")["roles"] = ["login"]  # a login group's MPI makes no default for compute nodes
    d["slurm"]["partitions"] = [{"name": "b", "nodes": "cpu"}]
    assert "MpiDefault" not in slurm_conf(spec_of(d))


def test_job_tasks_keep_slurmd_s_locked_memory_limit_where_compute_nodes_have_a_fabric() -> None:
    """Slurm FAQ (memlock): a login shell's locked-memory limit, propagated into the tasks, fails RDMA
    memory registration; PropagateResourceLimitsExcept=MEMLOCK gives them slurmd's (fabric_packages:
    slurm-memlock). The spec's list replaces the default; [] writes nothing (every limit propagates)."""
    d = data()
    assert "\nPropagateResourceLimitsExcept=MEMLOCK\n" in slurm_conf(spec_of(d))
    d["slurm"]["propagate_resource_limits_except"] = ["MEMLOCK", "STACK", "MEMLOCK"]
    assert "\nPropagateResourceLimitsExcept=MEMLOCK,STACK\n" in slurm_conf(spec_of(d))
    d["slurm"]["propagate_resource_limits_except"] = []
    assert "PropagateResourceLimits" not in slurm_conf(spec_of(d))
    d = data()
    for g in d["node_groups"]:
        g.pop("fabric", None)
    assert "PropagateResourceLimits" not in slurm_conf(spec_of(d))
    d["slurm"]["propagate_resource_limits_except"] = ["NOFILE"]
    assert "\nPropagateResourceLimitsExcept=NOFILE\n" in slurm_conf(spec_of(d))
    d["slurm"]["propagate_resource_limits_except"] = ["MEMLOCK\nSlurmUser=root"]
    with pytest.raises(SpecError, match="propagate_resource_limits_except"):
        spec_of(d)


def test_modules_follow_the_fabric_and_the_gpus() -> None:
    gpu = files_of(data(), "gpu1")
    assert gpu[MODULES_FILE].splitlines()[2:] == ["ib_uverbs", "rdma_ucm", "nvidia_peermem"]
    assert files_of(data(), "cpu1")[MODULES_FILE].splitlines()[2:] == ["ib_uverbs", "rdma_ucm", "rdma_rxe"]
    d = data()
    group(d, "gpu")["fabric"].update(peermem=False, ipoib={"interface": "ib0", "address_start": "10.20.0.11/16"})
    assert files_of(d, "gpu1")[MODULES_FILE].splitlines()[2:] == ["ib_uverbs", "rdma_ucm", "ib_ipoib"]
    d = data()
    group(d, "gpu")["fabric"]["gdrcopy"] = True  # no sha256 known for its files: gdrdrv is not loaded at boot
    assert "gdrdrv" not in files_of(d, "gpu1")[MODULES_FILE]
    d["sources"] = {"artifact_sha256": {n: "ab" * 32 for n in _gdrcopy_names()}}
    assert files_of(d, "gpu1")[MODULES_FILE].splitlines()[-1] == "gdrdrv"


def _gdrcopy_names() -> list[str]:
    """The default GDRCopy 2.6-1 files (fabric.gdrcopy_version)."""
    files = table.gdrcopy_files(platform_for(OsFamily.UBUNTU2404, Arch.X86_64), "2.6-1", "12.9") or []
    return [name for name, _ in files]


def test_soft_roce_script_names_each_device_after_its_interface() -> None:
    d = data()
    group(d, "cpu")["fabric"]["soft_roce"] = ["eth1", "ens2f0"]
    script = files_of(d, "cpu1")[SOFT_ROCE_SCRIPT]
    assert 'want="rxe_eth1 rxe_ens2f0"' in script
    assert "    rdma link add rxe_ens2f0 type rxe netdev ens2f0\n" in script
    unit = files_of(d, "cpu1")["/etc/systemd/system/gpuforge-soft-roce.service"]
    assert "Type=oneshot\nRemainAfterExit=yes\nExecStart=/usr/local/libexec/gpuforge/soft-roce\n" in unit
    assert "After=network-online.target" in unit and "WantedBy=multi-user.target" in unit


def test_roce_qos_script_sets_trust_pfc_and_ecn() -> None:
    assert pfc_bits([3]) == "0,0,0,1,0,0,0,0"
    assert pfc_bits([0, 7]) == "1,0,0,0,0,0,0,1"
    d = data()
    group(d, "cpu")["fabric"].update(
        stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT, hcas=["mlx5_0"],
        roce={"trust": "pcp", "pfc": [4, 3], "ecn": True},
    )  # fmt: skip
    script = files_of(d, "cpu1")[ROCE_QOS_SCRIPT]
    assert 'hcas="mlx5_0"' in script
    assert 'mlnx_qos -i "$netdev" --trust pcp\n' in script
    assert 'mlnx_qos -i "$netdev" --pfc 0,0,0,1,1,0,0,0\n' in script
    assert script.count('echo 1 > "$sysfs/class/net/$netdev/ecn/$point/enable/') == 2


def test_ipoib_network_file_gives_each_node_its_address() -> None:
    d = data()
    group(d, "gpu")["fabric"]["ipoib"] = {"interface": "ib0", "address_start": "10.20.0.11/16"}
    text = files_of(d, "gpu2")[IPOIB_NETWORK]
    assert text == (
        HEADER + "# IP over InfiniBand (fabric.ipoib), applied by systemd-networkd.\n[Match]\nName=ib0\n\n"
        "[Link]\nRequiredForOnline=no\n\n[Network]\nAddress=10.20.0.12/16\n"
    )


def test_enroot_nodes_get_the_rdma_hook() -> None:
    hook = files_of(data(), "gpu1")[ENROOT_HOOK]
    assert hook.startswith("#! /bin/bash\n" + HEADER)
    assert "x-create=dir,rbind,rw,nosuid,noexec,private" in hook
    d = data()
    d["slurm"]["containers"] = {"enroot": False, "pyxis": False}
    assert ENROOT_HOOK not in files_of(d, "gpu1")


def test_nccl_pin_holds_the_build() -> None:
    pin = files_of(data(), "gpu1")[NCCL_PIN]
    assert "Package: libnccl2 libnccl-dev\nPin: version 2.27.7-1+cuda12.9\nPin-Priority: 1001\n" in pin
    assert NCCL_PIN not in files_of(data(), "cpu1")  # no GPUs: no NCCL
    deb = ("libnccl2=2.27.7-1+cuda13.0", "libnccl-dev=2.27.7-1+cuda13.0")
    assert table.nccl_packages(True, "2.27.7-1", "13.0") == deb
    rpm = ("libnccl=2.27.7-1+cuda12.9", "libnccl-devel=2.27.7-1+cuda12.9")
    assert table.nccl_packages(False, "2.27.7-1", "12.9") == rpm


@pytest.mark.parametrize(
    ("os", "arch", "path"),
    [
        ("ubuntu22.04", "x86_64", "3.2.1/ubuntu22.04/x86_64"),
        ("ubuntu24.04", "aarch64", "3.2.1/ubuntu24.04/arm64-sbsa"),
        ("rocky9", "x86_64", "3.2.1/rhel9/x86_64"),
    ],
)
def test_doca_repository_per_platform_and_mode(os: str, arch: str, path: str) -> None:
    d = data()
    d["cluster"]["os"] = os
    jammy_data(d)
    group(d, "cpu").update(arch=arch)
    group(d, "cpu")["fabric"].update(stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
    spec = spec_of(d)
    node = node_of(spec, "cpu1")
    fabric = group(d, "cpu")["fabric"]
    repo = doca_repo(spec, node.platform, spec.node_groups[2].fabric)  # type: ignore[arg-type]
    assert repo.url == f"https://linux.mellanox.com/public/repo/doca/{path}"
    assert repo.key_url == "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub"
    files = files_of(d, "cpu1")
    if node.os.is_deb:
        assert files[DOCA_LIST] == HEADER + f"deb [signed-by=/usr/share/keyrings/gpuforge-doca.asc] {repo.url}/ ./\n"
    else:
        assert (
            f"baseurl={repo.url}\nenabled=1\ngpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/gpuforge-doca.asc\n"
            in (files[DOCA_REPO_FILE])
        )
    d["sources"] = {"mode": "mirror", "mirrors": {"doca": "http://10.9.0.1/doca/3.2.1/{distro}/{arch}"}}
    spec = spec_of(d)
    mirrored = doca_repo(spec, node.platform, spec.node_groups[2].fabric)  # type: ignore[arg-type]
    assert mirrored.url == f"http://10.9.0.1/doca/{path}"
    assert fabric["stack"] == "doca"


def test_doca_without_a_mirror_in_mirror_mode_has_no_source_and_no_file() -> None:
    d = data()
    d["sources"] = {"mode": "mirror", "apt_proxy": "http://10.9.0.1:3142"}
    group(d, "cpu")["fabric"].update(stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
    spec = spec_of(d)
    repo = doca_repo(spec, node_of(spec, "cpu1").platform, spec.node_groups[2].fabric)  # type: ignore[arg-type]
    assert not repo.available and "sources.mirrors.doca" in (repo.reason or "")
    assert DOCA_LIST not in files_of(d, "cpu1")


def test_data_table_rows() -> None:
    ubuntu = platform_for(OsFamily.UBUNTU2204, Arch.AARCH64)
    assert table.gdrcopy_files(ubuntu, "2.5.1-1", "13.0") == [
        (f"{p}_2.5.1-1_arm64.Ubuntu22_04.deb",
         f"https://developer.download.nvidia.com/compute/redist/gdrcopy/CUDA%2013.0/ubuntu22_04/aarch64/"
         f"{p}_2.5.1-1_arm64.Ubuntu22_04.deb")
        for p in ("gdrdrv-dkms", "libgdrapi", "gdrcopy")
    ]  # fmt: skip
    assert table.gdrcopy_files(platform_for(OsFamily.RHEL9, Arch.X86_64), "2.5.1-1", "12.9") is None
    assert table.doca_repo_path(platform_for(OsFamily.DEBIAN12, Arch.X86_64), "3.2.1") is None
    assert table.nccl_tests_file("2.18.3") == (
        "nccl-tests-2.18.3.tar.gz",
        "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.18.3.tar.gz",
    )
    for os, row in table.DISTRO_STACKS.items():
        assert all(c in table.SOURCES for c in row.cites), os
    for cite in table.MODULE_CITES:
        assert cite in table.SOURCES


def test_fabric_files_are_managed_files_of_the_node() -> None:
    spec = spec_of(data())
    paths = {f.path for f in render_node(spec, node_of(spec, "cpu1"))}
    assert {MODULES_FILE, SOFT_ROCE_SCRIPT, ENROOT_HOOK} <= paths

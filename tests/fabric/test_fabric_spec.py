"""The fabric section's field types and cross-field rules: each bad combination is refused with a
message naming its field, ``gpuforge check`` exits 2; the good ones load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuforge.spec.fabric import Fabric, FabricType, MpiFlavor, RdmaStack
from gpuforge.spec.fabric_rules import fabric_of, ipoib_address, pmix_default
from gpuforge.spec.nvidia_support import support_warnings
from tests import yaml_text
from tests.fabric.conftest import FINGERPRINT, data, group, node_of, problems, spec_of


def test_the_example_loads_with_its_defaults() -> None:
    spec = spec_of(data())
    f = fabric_of(spec, node_of(spec, "gpu1"))
    assert isinstance(f, Fabric)
    assert (f.type, f.stack, f.hcas, f.mpi, f.peermem, f.gdrcopy) == (
        FabricType.INFINIBAND, RdmaStack.DISTRO, "all", MpiFlavor.OPENMPI, True, False,
    )  # fmt: skip
    assert fabric_of(spec, node_of(spec, "ctl1")) is None
    assert pmix_default(spec)


def test_soft_roce_needs_roce() -> None:
    d = data()
    group(d, "gpu")["fabric"]["soft_roce"] = ["eth1"]
    assert "node_groups[1].fabric.soft_roce: Soft-RoCE devices are RoCE" in problems(d)


def test_ipoib_needs_infiniband_and_roce_qos_needs_roce() -> None:
    d = data()
    group(d, "cpu")["fabric"]["ipoib"] = {"interface": "ib0", "address_start": "10.20.0.1/16"}
    assert "node_groups[2].fabric.ipoib: IP over InfiniBand needs type: infiniband" in problems(d)
    d = data()
    group(d, "gpu")["fabric"]["roce"] = {"pfc": [3]}
    out = problems(d)
    assert "node_groups[1].fabric.roce: RoCE QoS settings need type: roce" in out
    assert "mlnx_qos" in out  # and it needs stack: doca


def test_doca_needs_a_pinned_version_and_key_and_a_cited_repository() -> None:
    d = data()
    group(d, "gpu")["fabric"]["stack"] = "doca"
    out = problems(d)
    assert "node_groups[1].fabric.doca_version: stack: doca needs doca_version" in out
    assert "node_groups[1].fabric.doca_key_fingerprint: stack: doca needs the fingerprint" in out
    group(d, "gpu")["fabric"].update(doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
    spec_of(d)  # Ubuntu 24.04: cited
    d["cluster"]["os"] = "debian12"
    assert "node_groups[1].fabric.stack: no DOCA-OFED repository is known for debian12" in problems(d)
    d["cluster"]["os"] = "rocky9"
    group(d, "gpu")["fabric"]["doca_version"] = "2.9.1"
    assert "node_groups[1].fabric.doca_version: DOCA 2.9.1 has one directory per RHEL minor release" in problems(d)


def test_doca_version_without_doca_and_bad_values_are_refused() -> None:
    d = data()
    group(d, "gpu")["fabric"]["doca_version"] = "3.2.1"
    assert "doca_version is for stack: doca" in problems(d)
    for field, value, text in (
        ("doca_version", "3.2", "doca_version"),
        ("nccl", "2.27.7", "nccl"),
        ("hcas", ["mlx5_0", "mlx5 1"], "not an RDMA device name"),
        ("hcas", [], "is empty"),
        ("firmware", "28.39", "firmware"),
        ("link_rate_gbps", 0, "link_rate_gbps"),
    ):
        d = data()
        group(d, "gpu")["fabric"][field] = value
        assert text in problems(d), (field, value)
    for netdev in ("eth0;reboot", "a" * 16, "eth:0", "", "../x"):
        d = data()
        group(d, "cpu")["fabric"]["soft_roce"] = [netdev]
        assert "node_groups[2].fabric.soft_roce" in problems(d), netdev


def test_roce_priorities_are_0_to_7_once_each() -> None:
    for pfc, text in (([8], "priorities are 0 to 7"), ([3, 3], "more than once")):
        d = data()
        group(d, "cpu")["fabric"].update(stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
        group(d, "cpu")["fabric"]["roce"] = {"pfc": pfc}
        assert text in problems(d)


def test_nccl_follows_the_driver_and_nccl_tests_has_what_it_builds_with() -> None:
    d = data()
    group(d, "gpu")["fabric"]["nccl_cuda"] = "14.0"
    assert "node_groups[1].fabric.nccl_cuda: CUDA 14.0 is newer than the CUDA 13 of driver branch 580" in problems(d)
    d = data()
    del group(d, "gpu")["fabric"]["nccl_cuda"]
    del d["versions"]["cuda_toolkit"]
    assert "node_groups[1].fabric.nccl_cuda: nccl need a CUDA release" in problems(d)
    d = data()
    group(d, "gpu")["fabric"].update(nccl_tests=True, mpi="none")
    del group(d, "gpu")["fabric"]["nccl"]
    del d["versions"]["cuda_toolkit"]
    out = problems(d)
    for text in ("set fabric.nccl", "set mpi: openmpi", "set versions.cuda_toolkit"):
        assert "node_groups[1].fabric.nccl_tests: " in out and text in out


def test_gdrcopy_only_where_its_packages_are_cited() -> None:
    d = data()
    group(d, "gpu")["fabric"]["gdrcopy"] = True
    spec_of(d)
    d["cluster"]["os"] = "debian12"
    d["versions"]["driver"] = {"version": "535.261.03"}
    group(d, "gpu")["fabric"]["nccl_cuda"] = "12.2"
    assert "node_groups[1].fabric.gdrcopy: no GDRCopy packages are known for debian12" in problems(d)


def test_peermem_on_the_distributions_rdma_stack_is_warned_about_not_refused() -> None:
    d = data()
    warned = support_warnings(spec_of(d))
    assert [".".join(map(str, w.loc)) for w in warned] == ["node_groups.1.fabric.peermem"]
    assert "set stack: doca, or peermem: false" in warned[0].message
    group(d, "gpu")["fabric"]["peermem"] = False
    assert support_warnings(spec_of(d)) == []
    group(d, "gpu")["fabric"].update(peermem=True, stack="doca", doca_version="3.2.1", doca_key_fingerprint=FINGERPRINT)
    assert support_warnings(spec_of(d)) == []


def test_peermem_gdrcopy_and_nccl_on_a_group_without_gpus_are_accepted() -> None:
    d = data()
    group(d, "cpu")["fabric"].update(peermem=True, gdrcopy=True, nccl="2.27.7-1", nccl_tests=True)
    spec_of(d)  # nothing to do there: no error (the layer does nothing for them)


def test_ipoib_addresses_follow_the_group_and_must_fit() -> None:
    d = data()
    group(d, "gpu")["fabric"]["ipoib"] = {"interface": "ib0", "address_start": "10.20.0.11/16"}
    spec = spec_of(d)
    assert ipoib_address(spec, node_of(spec, "gpu2")) == "10.20.0.12/16"
    group(d, "gpu")["fabric"]["ipoib"]["address_start"] = "10.20.0.254/24"
    assert "node_groups[1].fabric.ipoib.address_start: 2 nodes from 10.20.0.254 do not fit in 10.20.0.0/24" in (
        problems(d)
    )
    group(d, "gpu")["fabric"]["ipoib"]["address_start"] = "10.20.0.11"
    assert "needs its prefix length" in problems(d)


def test_check_exits_2_naming_the_field(tmp_path: Path) -> None:
    d = data()
    group(d, "gpu")["fabric"]["soft_roce"] = ["eth1"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text.dump(d))
    res = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert "node_groups[1].fabric.soft_roce" in res.stdout + res.stderr

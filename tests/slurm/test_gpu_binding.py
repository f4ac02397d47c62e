"""Slurm binds GPUs to jobs (issue 32, item 8): gres.conf, the NVML plugin, cgroup.conf, the validator.

Before: gres.conf was ``AutoDetect=off`` with MIG slices declared by ``Count=`` only (no device
files, no cgroup confinement) and the Slurm layer never installed the NVML plugin.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuforge.deploy.layers.slurm import nvml_packages
from gpuforge.render.slurm import cgroup_conf, gres_conf
from gpuforge.spec import Spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.spec.platforms import Arch, OsFamily
from gpuforge.spec.slurm_gpu import NVML_PLUGINS, SOURCES, nvml_installs, uses_nvml
from gpuforge.validator.cluster_gpu_jobs import gpu_job_command, gpu_request, judge_gpu_job, parse_gpu_jobs
from gpuforge.validator.node.base import FAIL, PASS
from tests.helpers import inventory, variant


def _no_mig(d: dict[str, Any]) -> None:
    d["slurm"].pop("gpu_autodetect")
    for g in d["node_groups"]:
        g.pop("mig_config", None)


def test_every_row_cites_known_sources() -> None:
    for row in NVML_PLUGINS.values():
        assert row.cites and all(c in SOURCES for c in row.cites), row.os


@pytest.mark.parametrize(
    ("os", "slurm", "installs"),
    [
        (OsFamily.DEBIAN12, "distro", False),  # plugin deb12u2, slurmd deb12u3: apt refuses the pair
        (OsFamily.DEBIAN12, "22.05.8-4+deb12u2", True),  # a site holding Slurm at the plugin's build
        (OsFamily.UBUNTU2204, "distro", False),  # no package at all
        (OsFamily.UBUNTU2404, "distro", False),  # not confirmed by any listing
        (OsFamily.RHEL9, "distro", False),  # not in the table
    ],
)
def test_nvml_plugin_installs_only_with_the_slurm_it_was_built_for(os: OsFamily, slurm: str, installs: bool) -> None:
    assert nvml_installs(os, Arch.X86_64, slurm) is installs


def test_without_the_plugin_whole_gpus_get_their_device_files() -> None:
    spec = variant("slurm-h100", _no_mig)
    assert gres_conf(spec).splitlines()[1:] == [
        "AutoDetect=off",
        "NodeName=gpu[001-060] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
        "NodeName=gpu[061-064] Name=gpu Type=h100 File=/dev/nvidia[0-7]",
    ]


def test_debian_pinned_at_the_plugins_build_autodetects_and_installs_the_plugin() -> None:
    def change(d: dict[str, Any]) -> None:
        _no_mig(d)
        d["cluster"]["os"] = "debian12"
        d["versions"]["slurm"] = "22.05.8-4+deb12u2"
        d["sources"] = {"mode": "upstream"}

    spec = variant("slurm-h100", change)
    assert "NodeName=gpu[001-060] AutoDetect=nvml" in gres_conf(spec).splitlines()
    nodes = {n.name: n for n in resolve_nodes(spec)}
    assert nvml_packages(spec, nodes["gpu001"]) == ["slurm-wlm-nvml-plugin=22.05.8-4+deb12u2"]


def test_mig_slices_are_found_by_nvml_and_the_plugin_is_installed(h100: Spec) -> None:
    """MIG groups: AutoDetect=nvml and no Count-only lines (the old, unbound form)."""
    lines = gres_conf(h100).splitlines()
    assert "NodeName=gpu[061-064] AutoDetect=nvml" in lines
    assert not any("Count=" in x for x in lines), "MIG slices declared by count are not bound to device files"
    mig_group = next(g for g in h100.node_groups if g.name == "mig")
    assert uses_nvml(h100, mig_group)
    nodes = {n.name: n for n in resolve_nodes(h100)}
    assert nvml_packages(h100, nodes["gpu061"]) == ["slurm-wlm-nvml-plugin"]
    assert nvml_packages(h100, nodes["ctl01"]) == []


def test_cgroup_conf_confines_devices(h100: Spec) -> None:
    assert "ConstrainDevices=yes" in cgroup_conf(h100).splitlines()


@pytest.fixture
def h100() -> Spec:
    return inventory("slurm-h100")


# --- the validator's one-GPU job -------------------------------------------------------------------
# Outputs below are SYNTHESIZED (no GPU on the machines these tests were written on): they follow the
# format of `nvidia-smi -L` as recorded in tests/facts/fixtures/mig/*.json (real A100/H100 captures).

ONE_GPU = ["__cvd=0", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5e375e7e-b41f-155b-dcdc-534524c356fc)"]
ALL_GPUS = ["__cvd=0"] + [
    f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-5e375e7e-b41f-155b-dcdc-534524c356f{i})" for i in range(8)
]
ONE_MIG = [
    "__cvd=MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a",
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)",
    "  MIG 1g.10gb     Device  0: (UUID: MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a)",
]


@pytest.mark.parametrize(
    ("gres", "out", "status"),
    [
        ("gpu:h100:1", ONE_GPU, PASS),
        ("gpu:h100:1", ALL_GPUS, FAIL),  # every GPU visible: not confined
        ("gpu:h100:1", ["__cvd=0,1", *ONE_GPU[1:]], FAIL),  # two CUDA_VISIBLE_DEVICES entries
        ("gpu:h100:1", ["__cvd=unset", *ONE_GPU[1:]], FAIL),  # Slurm set nothing: not bound
        ("gpu:1g.10gb:1", ONE_MIG, PASS),
        ("gpu:1g.10gb:1", ONE_MIG[:2], FAIL),  # the GPU but no MIG device under it
    ],
)
def test_one_gpu_job_sees_exactly_one(gres: str, out: list[str], status: str) -> None:
    got, why = judge_gpu_job(gres, 0, "\n".join(out))
    assert got == status, why


def test_gpu_job_command_and_parse(h100: Spec) -> None:
    nodes = {n.name: n for n in resolve_nodes(h100)}
    assert gpu_request(h100, nodes["gpu001"]) == "gpu:h100:1"
    assert gpu_request(h100, nodes["gpu061"]) == "gpu:1g.10gb:1"
    cmd = gpu_job_command([("gpu001", "gpu", "gpu:h100:1")])
    assert "srun -N1 -n1 -w gpu001 -p gpu -t 1 --gres=gpu:h100:1" in cmd and "nvidia-smi -L" in cmd
    parsed = parse_gpu_jobs("__node=gpu001\n" + "\n".join(ONE_GPU) + "\n__rc=0\n")
    assert parsed == {"gpu001": (0, "\n".join(ONE_GPU))}
    assert judge_gpu_job("gpu:h100:1", 1, "srun: error: Invalid generic resource (gres) specification")[0] == FAIL

"""Debian 13 nodes for real: three trixie lab nodes from scratch, the lab spec applied and validated.

Its own lab (``gflab-d13``, 10.213.25.0/24, ``lab up --os debian13``: the trixie rootfs built once
through the site mirror, cached beside bookworm's), always torn down. The lab spec fitted to it says
``cluster.os: debian13``; ``gpuforge apply`` converges the nodes from scratch with Debian 13's own
packages: Slurm 24.11 (slurmctld, slurmd, slurmdbd with MariaDB 11.8, accounting, QOS, the spec's
users), munge, Prometheus 2.53 and node-exporter, the health check. Checked: each node runs Debian 13
and Slurm 24.11 (``slurmd -V``), a job of a spec user runs on all three nodes and is accounted
(``sacct``), ``validate`` passes, a second apply changes nothing.

What Slurm forbids when releases are mixed (a Debian 12 slurmd beside Debian 13's slurmctld is outside
24.11's window) is refused before any host is touched: ``tests/spec/test_slurm_mix.py`` and
``tests/spec/bad/slurm_compute_*.yaml``.

Opt-in (``GPUFORGE_LAB_DEBIAN13_DRIVER=1``): node3 as a GPU node of the same lab, with Debian 13's own
NVIDIA driver (non-free, branch 550) built by DKMS for the node's kernel headers, as
tests/nvidia/test_nvidia_lab.py does for Debian 12's 535 in every run.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuforge.lab.pytest_plugin import own_lab
from tests.conftest import LabCluster, run_cli
from tests.nvidia.test_nvidia_lab import GPU_NODE, gpu_variant
from tests.slurm.lab_checks import a_job_runs_on_all_three_and_is_accounted

pytestmark = [pytest.mark.lab, pytest.mark.lab_beside]  # its own lab

NAME, SUBNET, NODES = "gflab-d13", "10.213.25.0/24", 3
#: trixie's non-free nvidia-driver (Debian's package index, 2026-11-28: ../shared/reference/lab-notes.md).
DRIVER = "550.163.01"


@pytest.fixture(scope="module")
def trixie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    with own_lab(NAME, NODES, SUBNET, releases=["debian13"]) as lab:
        yield LabCluster(lab, tmp_path_factory.mktemp("d13-spec"), tmp_path_factory.mktemp("d13-state"))


def test_debian13_nodes_converge_from_scratch_with_slurm_24_11_and_validate(trixie: LabCluster) -> None:
    c = trixie
    for node in ("node1", "node2", "node3"):
        assert 'VERSION_ID="13"' in c.ssh(node, "cat /etc/os-release")
    first = c.apply()
    assert first["returncode"] == 0 and first["ok"], json.dumps(first, indent=2)[-4000:] + failed_units(c, first)
    # Debian's build prints "slurm-wlm <version>"
    assert c.ssh("node2", "slurmd -V").strip().startswith("slurm-wlm 24.11."), "Debian 13's Slurm is 24.11"
    assert c.ssh("node1", "slurmdbd -V").strip().startswith("slurm-wlm 24.11.")
    a_job_runs_on_all_three_and_is_accounted(c)
    report = run_cli("validate", str(c.spec_path), "--json", env=c.env)
    assert report.returncode == 0, report.stdout[-4000:] + report.stderr[-2000:]
    assert json.loads(report.stdout)["ok"]
    again = c.apply()
    assert again["returncode"] == 0 and again["changes"] == 0, json.dumps(again, indent=2)[-3000:]


def failed_units(c: LabCluster, result: dict[str, Any]) -> str:
    """For a failure message: slurmd's and slurmctld's state and last journal lines on each node that failed."""
    cmd = ("systemctl show slurmd slurmctld -p Id,ActiveState,Result,ExecMainStatus; "
           "journalctl -u slurmd -u slurmctld -n 25 --no-pager 2>&1 | cut -c1-240")  # fmt: skip
    failed = [n for n, h in result.get("hosts", {}).items() if h.get("error")]
    return "".join(f"\n--- {n}:\n{c.ssh(n, cmd, check=False)}" for n in failed)


def d13_gpu_variant(d: dict[str, Any]) -> None:
    """tests/nvidia's GPU variant (node3 in its own group with one H100, containerd) at trixie's driver."""
    gpu_variant(d)
    d["versions"]["driver"] = {"version": DRIVER}


@pytest.mark.skipif(
    not os.environ.get("GPUFORGE_LAB_DEBIAN13_DRIVER"),
    reason="Debian 13's driver build (DKMS) runs with GPUFORGE_LAB_DEBIAN13_DRIVER=1: CI's budget holds one "
    "DKMS build, Debian 12's (tests/nvidia/test_nvidia_lab.py); this one's last result is in docs/nvidia.md",
)
def test_debian13_gpu_node_gets_debians_550_driver_built_by_dkms(trixie: LabCluster) -> None:
    c = trixie
    spec = c.write("d13-gpu.yaml", mutate=d13_gpu_variant)
    limit = ",".join(n.name for n in c.lab.state.nodes)  # a plain converge: no GPU to validate here
    t0 = time.monotonic()
    first = c.apply(spec, "--limit", limit)
    seconds = time.monotonic() - t0
    gpu = first["hosts"][GPU_NODE]
    assert "nvidia: driver" in gpu["changed"], json.dumps(first, indent=2)[-4000:] + failed_units(c, first)
    # Everything converged but slurmd on the GPU node: its gres.conf names /dev/nvidia0, which a node
    # without a GPU lacks (Debian 12's slurmd 22.05 starts and exits later; 24.11's start fails).
    assert all(h["error"] is None for n, h in first["hosts"].items() if n != GPU_NODE), json.dumps(first)[-3000:]
    story = failed_units(c, first)
    assert gpu["error"] is None or (gpu["error"].startswith("slurm: slurmd:") and "nvidia0" in story), story
    version = c.ssh(GPU_NODE, "dpkg-query -W -f='${Version}' nvidia-driver").strip()
    assert version.startswith(f"{DRIVER}-"), version
    headers = c.ssh(GPU_NODE, "dpkg-query -W -f='${Depends}' linux-headers-amd64").strip()
    dkms = c.ssh(GPU_NODE, "dkms status 2>&1", check=False)
    assert "nvidia" in dkms and "installed" in dkms, dkms
    built = c.ssh(GPU_NODE, "ls /lib/modules/*/updates/dkms/ 2>&1", check=False)
    assert "nvidia-current.ko" in built, built  # Debian names the module nvidia-current
    smi = c.lab.ssh(GPU_NODE, "nvidia-smi")
    assert smi.returncode in (9, 127), (smi.returncode, smi.stdout, smi.stderr)
    persistenced = c.ssh(GPU_NODE, "systemctl is-active nvidia-persistenced", check=False).strip()
    print(f"Debian 13 GPU node: driver {version}, headers {headers}, first apply {seconds:.0f} s\n{dkms}"
          f"nvidia-smi exit {smi.returncode}; nvidia-persistenced {persistenced}")  # fmt: skip
    assert persistenced != "active"  # nothing that needs a GPU is started
    # ... but once a GPU is there, it stays running (render/nvidia.py's persistenced_dropin)
    stops = c.ssh(GPU_NODE, "systemctl show -p StopWhenUnneeded nvidia-persistenced").strip()
    assert stops == "StopWhenUnneeded=no", c.ssh(GPU_NODE, "systemctl cat nvidia-persistenced", check=False)
    again = c.apply(spec, "--limit", limit)
    changed = {n: h["changed"] for n, h in again["hosts"].items() if h["changed"]}
    assert set(changed) <= {GPU_NODE} and {"nvidia: driver"}.isdisjoint(changed.get(GPU_NODE, [])), changed
    assert c.ssh(GPU_NODE, "grep -c ' install nvidia-driver:' /var/log/dpkg.log").strip() == "1"
    print(f"first apply: {GPU_NODE} error {gpu['error']!r}\n{story}\nsecond apply changed {changed}")

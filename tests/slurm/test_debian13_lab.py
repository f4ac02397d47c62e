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
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gpuforge.lab.pytest_plugin import own_lab
from tests.conftest import LabCluster, run_cli
from tests.slurm.lab_checks import a_job_runs_on_all_three_and_is_accounted

pytestmark = [pytest.mark.lab, pytest.mark.lab_beside]  # its own lab

NAME, SUBNET, NODES = "gflab-d13", "10.213.25.0/24", 3


@pytest.fixture(scope="module")
def trixie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    with own_lab(NAME, NODES, SUBNET, releases=["debian13"]) as lab:
        yield LabCluster(lab, tmp_path_factory.mktemp("d13-spec"), tmp_path_factory.mktemp("d13-state"))


def test_debian13_nodes_converge_from_scratch_with_slurm_24_11_and_validate(trixie: LabCluster) -> None:
    c = trixie
    for node in ("node1", "node2", "node3"):
        assert 'VERSION_ID="13"' in c.ssh(node, "cat /etc/os-release")
    first = c.apply()
    assert first["returncode"] == 0 and first["ok"], json.dumps(first, indent=2)[-4000:]
    # Debian's build prints "slurm-wlm <version>"
    assert c.ssh("node2", "slurmd -V").strip().startswith("slurm-wlm 24.11."), "Debian 13's Slurm is 24.11"
    assert c.ssh("node1", "slurmdbd -V").strip().startswith("slurm-wlm 24.11.")
    a_job_runs_on_all_three_and_is_accounted(c)
    report = run_cli("validate", str(c.spec_path), "--json", env=c.env)
    assert report.returncode == 0, report.stdout[-4000:] + report.stderr[-2000:]
    assert json.loads(report.stdout)["ok"]
    again = c.apply()
    assert again["returncode"] == 0 and again["changes"] == 0, json.dumps(again, indent=2)[-3000:]

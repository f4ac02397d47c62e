"""One cluster on two Debian releases with one Slurm: gpuforge's build of SchedMD's 24.11.5 for each.

Its own lab (``gflab-mx``, 10.213.27.0/24), always torn down: node1 (controller, slurmdbd, compute) and
node3 (compute) run Debian 13, node2 (compute) runs Debian 12. Their own Slurm releases cannot run
together (a 22.05 slurmd is outside the window of releases a 24.11 slurmctld accepts:
``gpuforge/spec/slurm_releases.py``), so ``check`` refuses the distro Slurm on this mix and names the way
out. With ``slurm.source: build`` and one build host per release, ``apply`` builds SchedMD's 24.11.5
twice (on node1 for Debian 13, on node2 for Debian 12), gives each node the build of its release, and
converges them; a job of a spec user runs on all three nodes across both releases and is accounted;
``validate`` passes; a second apply changes nothing.

The two compiles take about 20 min of both cores: marked ``lab_build`` (``GPUFORGE_LAB_BUILD=1``), as
the single-release build test.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.lab.pytest_plugin import own_lab
from gpuforge.spec.slurm_tarballs import DEBIAN_POOL_PATH, TARBALLS
from tests.conftest import LAB_SPEC, LabCluster, run_cli
from tests.slurm.lab_checks import a_job_runs_on_all_three_and_is_accounted

pytestmark = [pytest.mark.lab, pytest.mark.lab_beside, pytest.mark.lab_build, pytest.mark.timeout(5400)]

NAME, SUBNET, NODES = "gflab-mx", "10.213.27.0/24", 3
ROW = TARBALLS["24.11.5"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    with own_lab(NAME, NODES, SUBNET, releases=["debian13", "node2=debian12"]) as lab:
        base = split_workers(yaml.safe_load(LAB_SPEC.read_text()))
        yield LabCluster(lab, tmp_path_factory.mktemp("mx-spec"), tmp_path_factory.mktemp("mx-state"), base)


def split_workers(base: dict[str, Any]) -> dict[str, Any]:
    """The lab spec with one worker group per release (node2: Debian 12, node3: Debian 13)."""
    data = copy.deepcopy(base)
    workers = next(g for g in data["node_groups"] if g["name"] == "workers")
    data["node_groups"].remove(workers)
    for name, host, address in (("w12", "node2", "10.213.0.12"), ("w13", "node3", "10.213.0.13")):
        data["node_groups"].append({**copy.deepcopy(workers), "name": name, "hosts": host, "address_start": address})
    data["slurm"]["partitions"][0]["nodes"] = "ctl,w12,w13"
    return data


def build_spec(c: LabCluster, name: str = "spec.yaml") -> Path:
    url = f"{c.lab.state.mirror_url}/debian/{DEBIAN_POOL_PATH.format(file_name=ROW.file_name)}"

    def mutate(data: dict[str, Any]) -> None:
        data["versions"]["slurm"] = ROW.deb_version
        data["slurm"]["source"] = "build"
        data["slurm"]["build"] = {"tarball": url, "hosts": ["node1", "node2"]}

    return c.write(name, mutate=mutate)


def test_a_cluster_on_debian_12_and_13_runs_one_built_slurm_across_both(mixed: LabCluster) -> None:
    c = mixed
    assert 'VERSION_ID="12"' in c.ssh("node2", "cat /etc/os-release")
    for node in ("node1", "node3"):
        assert 'VERSION_ID="13"' in c.ssh(node, "cat /etc/os-release")
    distro = run_cli("check", str(c.write("distro.yaml")), env=c.env)
    assert distro.returncode == 2, distro.stdout[-2000:] + distro.stderr[-2000:]
    assert "slurm.source: build" in distro.stdout + distro.stderr, distro.stdout + distro.stderr

    spec = build_spec(c)
    started = time.monotonic()
    first = c.apply(spec)
    took = time.monotonic() - started
    assert first["returncode"] == 0 and first["ok"], json.dumps(first, indent=2)[-4000:] + c.outputs[-1][-3000:]
    for platform, host in (("debian13-x86_64", "node1"), ("debian12-x86_64", "node2")):
        [folder] = (c.state_dir / "slurm-builds").glob(f"{platform}-24.11.5-1-*")
        record = json.loads((folder / "build.json").read_text())
        assert record["host"] == host
        print(f"build of Slurm {ROW.version} for {platform} on {host}: {record['seconds']} s")
    print(f"apply in all (two builds and three nodes): {took:.0f} s")

    for node in ("node1", "node2", "node3"):
        assert c.ssh(node, "slurmd -V").strip() == "slurm 24.11.5", node
        assert c.ssh(node, "dpkg-query -W -f '${Version}' slurm-smd-client") == ROW.deb_version, node
    a_job_runs_on_all_three_and_is_accounted(c)
    report = run_cli("validate", str(spec), "--json", env=c.env)
    assert report.returncode == 0, report.stdout[-4000:] + report.stderr[-2000:]
    second = c.apply(spec)
    assert second["returncode"] == 0 and second["changes"] == 0, json.dumps(second, indent=2)[-3000:]

"""SchedMD's Slurm 24.11.5 built from its release tarball on a lab node, installed on three Debian 12 nodes.

Its own lab (``gflab-sb``, 10.213.26.0/24), always torn down. The tarball is the archive of SchedMD's tag
``slurm-24-11-5-1`` as Debian's archive carries it (``slurm-wlm_24.11.5.orig.tar.gz``), fetched through
the lab's site mirror (apt-cacher-ng) as a site would fetch SchedMD's download, and used only with the
sha256 of gpuforge's cited table (``gpuforge/spec/slurm_tarballs.py``).

Checked, in order:

* a corrupted tarball (served from loopback with the table's digest) stops ``apply`` with exit 1 before
  any host is touched: nothing on the build host, no build kept;
* ``apply`` with ``slurm.source: build`` builds SchedMD's debs on node1 (``dpkg-buildpackage`` of the
  tarball's own ``debian/``), signs them into a repository that every node gets, and converges Slurm
  24.11.5 from it with accounting (slurmdbd on MariaDB), QOS and the spec's users on Debian 12, whose
  own Slurm is 22.05;
* a job of a spec user runs on all three nodes and is accounted; ``validate`` passes;
* ``gpuforge slurm-build`` then takes the cache (no compile) and a second apply changes nothing.

The compile takes about 10 min of both cores, which CI's time limit cannot hold beside the rest of the
suite: ``scripts/test.sh`` runs this test only with ``GPUFORGE_LAB_BUILD=1`` (its last result:
``bench/results/slurm_build.json``). In every run, ``tests/slurm/test_slurm_build.py`` runs the same build
commands through a real shell with stub build tools, and the real fetch, digest check and signing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.lab.pytest_plugin import own_lab
from gpuforge.spec.slurm_tarballs import DEBIAN_POOL_PATH, TARBALLS
from tests.bundle.conftest import Server
from tests.conftest import LabCluster, run_cli
from tests.slurm.lab_checks import a_job_runs_on_all_three_and_is_accounted

# its own lab; a compile of Slurm (lab_build): scripts/test.sh runs it with GPUFORGE_LAB_BUILD=1 only
pytestmark = [pytest.mark.lab, pytest.mark.lab_beside, pytest.mark.lab_build]

NAME, SUBNET, NODES = "gflab-sb", "10.213.26.0/24", 3
ROW = TARBALLS["24.11.5"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    with own_lab(NAME, NODES, SUBNET) as lab:
        yield LabCluster(lab, tmp_path_factory.mktemp("sb-spec"), tmp_path_factory.mktemp("sb-state"))


def build_spec(c: LabCluster, tarball_url: str, name: str = "spec.yaml") -> Path:
    def mutate(data: dict[str, Any]) -> None:
        data["versions"]["slurm"] = ROW.deb_version
        data["slurm"]["source"] = "build"
        data["slurm"]["build"] = {"tarball": tarball_url, "hosts": ["node1"]}

    return c.write(name, mutate=mutate)


def test_slurm_24_11_built_from_the_release_tarball_runs_jobs_with_accounting(
    built: LabCluster, tmp_path: Path
) -> None:
    c = built
    mirror_url = f"{c.lab.state.mirror_url}/debian/{DEBIAN_POOL_PATH.format(file_name=ROW.file_name)}"
    www = tmp_path / "www"
    www.mkdir()
    corrupted = bytearray(b"not SchedMD's tarball" * 1000)
    (www / ROW.file_name).write_bytes(bytes(corrupted))
    server = Server(www)
    server.start()
    try:
        bad = run_cli("apply", "--yes", str(build_spec(c, f"{server.url}/{ROW.file_name}", "bad.yaml")), env=c.env)
    finally:
        server.stop()
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert f"does not match the published {ROW.sha256}" in bad.stderr
    assert c.ssh("node1", "ls /var/tmp/gpuforge-slurm-build 2>/dev/null | wc -l").strip() == "0"
    assert not list((c.state_dir / "slurm-builds").glob("debian12-*")), "no build kept"

    spec = build_spec(c, mirror_url)
    started = time.monotonic()
    first = c.apply(spec)
    took = time.monotonic() - started
    assert first["returncode"] == 0 and first["ok"], json.dumps(first, indent=2)[-4000:] + c.outputs[-1][-3000:]
    [folder] = (c.state_dir / "slurm-builds").glob("debian12-x86_64-24.11.5-1-*")
    record = json.loads((folder / "build.json").read_text())
    print(f"build of Slurm {ROW.version} on node1: {record['seconds']} s; apply in all: {took:.0f} s")
    tarball = c.state_dir / "slurm-builds" / "tarballs" / f"{ROW.sha256}.tar.gz"
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == ROW.sha256

    for node in ("node1", "node2", "node3"):
        assert c.ssh(node, "slurmd -V 2>/dev/null || sinfo -V").strip() == "slurm 24.11.5", node
        held = c.ssh(node, "dpkg-query -W -f '${Version}' slurm-smd-client")
        assert held == ROW.deb_version
    assert "slurm-smd-slurmdbd" in c.ssh("node1", "dpkg-query -W -f '${Package}\\n' 'slurm-smd*'")
    assert c.ssh("node1", "slurmdbd -V").strip() == "slurm 24.11.5"
    # slurm-smd's mpi/pmix plugin opens libpmix-dev's libpmix.so (slurm_packages schedmd-pmix-dlopen)
    assert c.ssh("node1", "dpkg-query -W -f '${db:Status-Status}' libpmix-dev") == "installed"
    log = c.ssh("node1", "cat /var/log/slurm/slurmctld.log")
    assert "slurmctld version 24.11.5 started" in log and "can not load PMIx library" not in log, log[-3000:]
    a_job_runs_on_all_three_and_is_accounted(c)
    report = run_cli("validate", str(spec), "--json", env=c.env)
    assert report.returncode == 0, report.stdout[-4000:] + report.stderr[-2000:]

    again = run_cli("slurm-build", str(spec), "--json", env=c.env)
    assert again.returncode == 0, again.stderr[-2000:]
    [row] = json.loads(again.stdout)["builds"]
    assert row["cached"] is True and row["folder"] == str(folder)
    assert c.ssh("node1", "ls /var/tmp/gpuforge-slurm-build 2>/dev/null | wc -l").strip() == "0"
    second = c.apply(spec)
    assert second["returncode"] == 0 and second["changes"] == 0, json.dumps(second, indent=2)[-3000:]

"""``gpuforge slurm-upgrade`` on real lab nodes (issue 35), then ``apply`` of the new spec drains nothing.

Its own 3-node lab (``gflab-up``, 10.213.13.0/24), always torn down: node1 controller and slurmdbd
with MariaDB, node2 and node3 compute, one batch each. The lab reaches one Slurm release only
(Debian 12's; bookworm-backports carries no Slurm), so the test makes a second build of it: each node
repacks the Slurm packages it has (``dpkg-deb -R``, the version and the exact-version dependencies
raised to ``<version>+gf1``, ``dpkg-deb -b``) into a local apt repository (``file:``, trusted). The
same binaries under another package version: what a Debian security update of Slurm looks like, and
what the flow must carry out in SchedMD's order all the same.

Checked: a job accounted before, and one running through the upgrade; the flow's dump under the
state directory; every Slurm package on every node at the new version afterwards; sacct still has
the jobs from before and the running one completed; then ``apply`` of the spec naming the new version
drains no node (the run log has no drain) and validate passes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.lab.pytest_plugin import own_lab
from tests import yaml_text
from tests.conftest import LAB_SPEC, LabCluster, run_cli
from tests.helpers import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.lab_beside]  # its own lab; mostly waits on Slurm

NAME, SUBNET, NODES = "gflab-up", "10.213.13.0/24", 3
REPO = "/srv/gpuforge-test-repo"
PATTERNS = "'slurm*' 'libslurm*' 'libpmi0' 'libpmi2-0' 'sview'"  # slurm_upgrade_commands.DEB_PATTERNS
INSTALLED = f"dpkg-query -W -f '${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' {PATTERNS} 2>/dev/null"


def upgrade_spec(base: dict[str, Any], slurm: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(yaml_text.dump(base))
    hw = data["node_groups"][0]["hardware"]
    data["cluster"]["name"] = "gfup"
    data["versions"]["slurm"] = slurm
    data["node_groups"] = [
        {"name": "ctl", "hosts": "node1", "roles": ["controller", "accounting-db"], "hardware": hw},
        {"name": "workers", "hosts": "node[2-3]", "roles": ["compute"], "hardware": hw},
    ]
    data.pop("topology", None)
    data["rollout"] = {"batch_size": 1}
    slurm_ = data["slurm"]
    slurm_["partitions"] = [{"name": "batch", "nodes": "workers", "default": True, "max_time": "1:00:00"}]
    slurm_["health_check"] = {"enabled": False}
    data["monitoring"] = {"prometheus": False, "node_exporter": False}
    return data


def repack(old: str, new: str) -> str:
    """Shell: this node's installed Slurm packages at ``old``, rebuilt as ``new``, in a flat repository."""
    esc = old.replace(".", "\\.").replace("+", "\\+")
    return f"""set -e
rm -rf {REPO} && mkdir -p {REPO}/build && cd {REPO}/build
pkgs=$({INSTALLED} | awk '$3 ~ /^.i/ {{print $1 "={old}"}}')
apt-get download -q $pkgs >/dev/null
for f in *.deb; do
  d=${{f%.deb}}; dpkg-deb -R "$f" "$d"
  sed -i -E -e 's/^Version: {esc}$/Version: {new}/' -e 's/\\(= {esc}\\)/(= {new})/g' "$d/DEBIAN/control"
  dpkg-deb -b "$d" "../$(dpkg-deb -f "$f" Package)-gf.deb" >/dev/null
done
cd {REPO} && rm -rf build
for f in *.deb; do dpkg-deb -f "$f"; echo "Filename: ./$f"; echo "Size: $(stat -c %s "$f")"
  echo "SHA256: $(sha256sum "$f" | cut -d' ' -f1)"; echo; done > Packages
echo 'deb [trusted=yes] file:{REPO} ./' > /etc/apt/sources.list.d/gpuforge-test-repo.list
ls {REPO}/*.deb | wc -l"""


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    with own_lab(NAME, NODES, SUBNET) as lab:
        c = LabCluster(lab, tmp_path_factory.mktemp("up-spec"), tmp_path_factory.mktemp("up-state"))
        c.base = upgrade_spec(yaml.safe_load(LAB_SPEC.read_text()), "distro")
        c.spec_path = c.write()
        result = c.apply()
        assert result["returncode"] == 0 and result["ok"], json.dumps(result, indent=1)[-4000:]
        yield c


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 300, every: float = 2) -> Any:
    return wait_until(what, fn, timeout, every)


def installed(c: LabCluster, node: str) -> dict[str, str]:
    rows = (line.split() for line in c.ssh(node, INSTALLED, check=False).splitlines())
    return {r[0]: r[1] for r in rows if len(r) == 3 and r[2][1:2] == "i"}


def sacct(c: LabCluster, jobs: list[str]) -> dict[str, str]:
    out = c.ssh("node1", f"sacct -n -P -X -j {','.join(jobs)} -o JobID,State", check=False)
    return dict(line.split("|") for line in out.splitlines() if "|" in line)


def submit(c: LabCluster, wrap: str) -> str:
    out = c.ssh("node1", f"su alice -c \"sbatch --parsable --chdir=/tmp -A research -w node3 --wrap '{wrap}'\"")
    job = out.strip().split(";")[0]
    assert job.isdigit(), out
    return job


def test_slurm_upgrade_keeps_jobs_and_accounting_and_apply_then_drains_nothing(cluster: LabCluster) -> None:
    c = cluster
    old = installed(c, "node2")["slurmd"]
    new = f"{old}+gf1"
    for node in ("node1", "node2", "node3"):
        print(f"{node}: {c.ssh(node, repack(old, new)).strip()} packages rebuilt as {new}")

    before = submit(c, "hostname")
    wait_for("the first job accounted", lambda: sacct(c, [before]).get(before) == "COMPLETED")
    running = submit(c, "sleep 150")  # on node3, the second batch: it runs through every step
    wait_for("the job running", lambda: "RUNNING" in c.ssh("node1", f"squeue -h -j {running} -o %T", check=False))

    spec = c.write("new.yaml", mutate=lambda d: d["versions"].update(slurm=new))
    started = time.monotonic()
    cp = run_cli("slurm-upgrade", str(spec), "--yes", env=c.env, timeout=1800)
    print(cp.stdout + cp.stderr[-3000:])
    assert cp.returncode == 0, cp.stderr[-3000:]
    print(f"slurm-upgrade took {time.monotonic() - started:.0f} s")
    assert c.ssh("node1", f"squeue -h -j {running} -o %T", check=False).strip() == "RUNNING"
    for node in ("node1", "node2", "node3"):
        versions = installed(c, node)
        assert versions and set(versions.values()) == {new}, (node, versions)
    dumps = c.ssh("node1", "ls /var/lib/slurm/slurmctld/gpuforge-backup/").split()
    assert any(d.startswith("slurm_acct_db-") and d.endswith(".sql") for d in dumps), dumps

    done = wait_for("both jobs in sacct", lambda: (s := sacct(c, [before, running])) and set(s.values()) == {
        "COMPLETED"} and s, timeout=300)  # fmt: skip
    assert done == {before: "COMPLETED", running: "COMPLETED"}

    runs = c.state_dir / "runs"
    known = set(runs.glob("*.jsonl")) if runs.exists() else set()
    result = c.apply(spec)
    assert result["returncode"] == 0 and result["ok"], json.dumps(result, indent=1)[-3000:]
    (log,) = set(runs.glob("*.jsonl")) - known
    events = [json.loads(line) for line in Path(log).read_text().splitlines()]
    assert not [e for e in events if e["event"] in ("drain", "resume")], events
    report = run_cli("validate", str(spec), "--json", env=c.env)
    failed = [(n["name"], r["id"], r["message"]) for n in json.loads(report.stdout)["nodes"] for r in n["checks"]
              if r["status"] == "fail"]  # fmt: skip
    assert report.returncode == 0 and not failed, failed

"""A real major-version upgrade: SchedMD's Slurm 24.11.5 built from its tarball, then ``slurm-upgrade`` to 26.05.

Its own lab (``gflab-mu``, 10.213.28.0/24), always torn down: node1 controller, slurmdbd (MariaDB) and
build host, node2 and node3 compute, one batch each (the spec of ``test_slurm_upgrade_lab.py``), Debian 12.

* ``apply`` with ``slurm.source: build`` builds 24.11.5 from the tarball of gpuforge's cited table
  (through the lab's site mirror) and converges it with accounting.
* Several days of synthetic accounting: one real job's row in slurmdbd's job table copied
  ``SYNTHETIC`` times with other job ids, one every two minutes back in time (MariaDB's SEQUENCE
  engine), as a busy week leaves it; ``sacct`` counts them.
* A job runs on node3 (the second batch) through the whole upgrade.
* ``slurm-upgrade`` to 26.05.3, built from SchedMD's release tag the same way: the tarball is the
  operator's (``slurm.build.sha256`` pinned; gpuforge's table has no 26.05.3 row), served from
  loopback. The upgrade builds it first, publishes it to every node, backs the database up, converts
  it with the new slurmdbd (timed from slurmdbd's own log lines), then slurmctld, then slurmd batch by
  batch.
* Afterwards: ``sacct`` counts every earlier job, the running job completed, every node's slurmd and
  ``scontrol show node`` say 26.05.3, the next ``apply`` drains nothing and changes nothing, and
  ``validate`` passes.

Where 26.05.3 comes from: Debian's archive (forky) lists 26.05.5 in its ``Sources`` index, but the
mirror reachable here answers 404 for that file; SchedMD's git repository has the tag
``slurm-26-05-3-1`` (SchedMD's ``debian/changelog``: ``slurm-smd (26.05.3-1)``). Its tree as
``git archive --format=tar.gz --prefix=slurm-slurm-26-05-3-1/ slurm-26-05-3-1`` is what the operator
hands this test: ``GPUFORGE_SLURM_NEXT_TARBALL`` (the file) and ``GPUFORGE_SLURM_NEXT_SHA256`` (its
pin). Without them the test is skipped, saying so. Two compiles (about 6 min each on 2 cores): marked
``lab_build`` (``GPUFORGE_LAB_BUILD=1``), its last result in ``bench/results/slurm_major_upgrade.json``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.lab.pytest_plugin import own_lab
from gpuforge.spec.slurm_tarballs import DEBIAN_POOL_PATH, TARBALLS
from tests.bundle.conftest import Server
from tests.conftest import LAB_SPEC, LabCluster, run_cli
from tests.slurm.test_slurm_upgrade_lab import sacct, submit, upgrade_spec, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.lab_beside, pytest.mark.lab_build, pytest.mark.timeout(5400)]

NAME, SUBNET, NODES = "gflab-mu", "10.213.28.0/24", 3
OLD = TARBALLS["24.11.5"]
NEW_VERSION = "26.05.3-1"
SYNTHETIC = 5000
DB = "slurm_acct_db"
NEXT_TARBALL, NEXT_SHA256 = os.environ.get("GPUFORGE_SLURM_NEXT_TARBALL"), os.environ.get("GPUFORGE_SLURM_NEXT_SHA256")


def build_fields(d: dict[str, Any], version: str, tarball: str, sha256: str | None = None) -> None:
    d["versions"]["slurm"] = version
    d["slurm"]["source"] = "build"
    d["slurm"]["build"] = {"tarball": tarball, "hosts": ["node1"], **({"sha256": sha256} if sha256 else {})}


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    if not (NEXT_TARBALL and NEXT_SHA256 and Path(NEXT_TARBALL).is_file()):
        pytest.skip("no second Slurm release here: set GPUFORGE_SLURM_NEXT_TARBALL and GPUFORGE_SLURM_NEXT_SHA256 "
                    "(SchedMD's tag slurm-26-05-3-1 as a tarball; see this file's docstring)")  # fmt: skip
    with own_lab(NAME, NODES, SUBNET) as lab:
        base = upgrade_spec(yaml.safe_load(LAB_SPEC.read_text()), "distro")
        c = LabCluster(lab, tmp_path_factory.mktemp("mu-spec"), tmp_path_factory.mktemp("mu-state"), base)
        mirror = f"{lab.state.mirror_url}/debian/{DEBIAN_POOL_PATH.format(file_name=OLD.file_name)}"
        c.spec_path = c.write(mutate=lambda d: build_fields(d, OLD.deb_version, mirror))
        started = time.monotonic()
        result = c.apply()
        assert result["returncode"] == 0 and result["ok"], json.dumps(result, indent=1)[-4000:] + c.outputs[-1][-3000:]
        print(f"24.11.5 built and converged in {time.monotonic() - started:.0f} s")
        yield c


def synthesize_week(c: LabCluster, job: str, count: int) -> None:
    """``count`` copies of job ``job``'s row in the job table, new ids, one every 120 s back from now (the
    column names quoted: the job table has a column ``partition``, a reserved word of MariaDB's)."""
    table = f"{c.base['cluster']['name']}_job_table"
    now = int(time.time())
    script = f"""set -e
cols=$(mysql -N -e "set session group_concat_max_len = 65536;
  select group_concat(concat(char(96), column_name, char(96)) order by ordinal_position) from information_schema.columns
  where table_schema='{DB}' and table_name='{table}'
  and column_name not in ('job_db_inx','id_job','time_submit','time_eligible','time_start','time_end')")
mysql {DB} -e "insert into {table} ($cols,id_job,time_submit,time_eligible,time_start,time_end)
  select $cols,1000000+s.seq,{now}-s.seq*120,{now}-s.seq*120,{now}-s.seq*120+5,{now}-s.seq*120+65
  from {table} join seq_1_to_{count} s where id_job={job}"
"""
    c.ssh("node1", script)


def jobs_in_sacct(c: LabCluster) -> set[str]:
    """The job ids sacct lists over the last eight days (every user)."""
    out = c.ssh("node1", "sacct -a -X -n -P -o JobID -S now-8days -E now", check=False)
    return {line.strip() for line in out.splitlines() if line.strip()}


#: What slurmdbd logs while it brings the database to its release: its table changes
#: (``src/database/mysql_common.c``: "adding column %s after %s in table %s", "adding key ...",
#: "changing column ...") and the versioned conversion (``as_mysql_convert.c``: "pre-converting ...",
#: "Conversion done: success!"). The latter only runs when ``CONVERT_VERSION`` changes: it is 16 in
#: both 24.11.5 and 26.05.3, so this hop logs table changes and no "Conversion done".
SCHEMA_LINE = re.compile(r"(adding|changing|dropping) (column|key)|pre-converting|post-converting|Conversion done")


def conversion_seconds(log: str, version: str) -> tuple[float, list[str]]:
    """From slurmdbd's log: seconds from the first schema change to "slurmdbd version VERSION started"
    (the new slurmdbd's first start: it listens only once its database is current)."""
    lines = log.splitlines()
    started = next((i for i, ln in enumerate(lines) if f"slurmdbd version {version} started" in ln), None)
    assert started is not None, f"no 'slurmdbd version {version} started' in slurmdbd's log:\n{log[-3000:]}"
    changes = [ln for ln in lines[:started] if SCHEMA_LINE.search(ln)]
    assert changes, f"slurmdbd {version} started without changing its database:\n{log[-3000:]}"
    assert not any("Conversion done" in ln and "success" not in ln for ln in changes), changes
    stamp = re.compile(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\]")
    first, done = (stamp.match(ln) for ln in (changes[0], lines[started]))
    assert first and done, (changes[0], lines[started])
    took = (datetime.fromisoformat(done.group(1)) - datetime.fromisoformat(first.group(1))).total_seconds()
    return took, [*changes[:3], f"... {len(changes)} schema lines in all", lines[started]]


#: A deploy's per-layer progress line ("slurm: 1/1 node(s) done, 0 running, 0 failed, 0 s").
PROGRESS = re.compile(r"^[a-z-]+: \d+(/\d+)? node\(s\) (done|ok)")


def versions_everywhere(c: LabCluster) -> dict[str, str]:
    out = {n: c.ssh(n, "slurmd -V 2>/dev/null || slurmctld -V").strip() for n in ("node1", "node2", "node3")}
    nodes = c.ssh("node1", "scontrol show node node2,node3 | grep -o 'Version=[^ ]*'")
    out["scontrol"] = " ".join(sorted(set(nodes.split())))
    return out


#: The file on node3 whose appearance ends the job that runs through the upgrade.
RELEASE = "/var/tmp/gpuforge-test-release"


def test_24_11_to_26_05_keeps_every_job_and_the_running_one(cluster: LabCluster, tmp_path: Path) -> None:
    c = cluster
    assert versions_everywhere(c)["node2"] == "slurm 24.11.5"
    first = submit(c, "hostname")
    wait_for("the first job accounted", lambda: sacct(c, [first]).get(first) == "COMPLETED")
    synthesize_week(c, first, SYNTHETIC)
    before = jobs_in_sacct(c)
    assert len(before) >= SYNTHETIC + 1 and first in before, len(before)
    # node3, the second batch: the job runs until the test lets it end, after the upgrade (a fixed
    # sleep ended before it: the upgrade builds 26.05 first, for longer than any sleep one can pick)
    running = submit(c, f"while [ ! -e {RELEASE} ]; do sleep 2; done")
    wait_for("the job running", lambda: "RUNNING" in c.ssh("node1", f"squeue -h -j {running} -o %T", check=False))

    www = tmp_path / "www"
    www.mkdir()
    name = f"slurm-{NEW_VERSION.rsplit('-', 1)[0]}.tar.gz"
    (www / name).write_bytes(Path(str(NEXT_TARBALL)).read_bytes())
    server = Server(www)
    server.start()
    try:
        spec = c.write("new.yaml", mutate=lambda d: build_fields(d, NEW_VERSION, f"{server.url}/{name}", NEXT_SHA256))
        plan = run_cli("slurm-upgrade", str(spec), "--plan", env=c.env, timeout=600)
        assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
        print(plan.stdout)
        started = time.monotonic()
        cp = run_cli("slurm-upgrade", str(spec), "--yes", env=c.env, timeout=3600)
        took = time.monotonic() - started
    finally:
        server.stop()
    # the upgrade's own lines (each deploy's per-layer progress left out: it would push them out)
    own = [ln for ln in cp.stdout.splitlines() if not PROGRESS.search(ln)]
    print("\n".join(own)[-8000:] + cp.stderr[-3000:])
    assert cp.returncode == 0, cp.stderr[-3000:]
    assert c.ssh("node1", f"squeue -h -j {running} -o %T", check=False).strip() == "RUNNING"
    c.ssh("node3", f"touch {RELEASE}")  # the job that ran through the upgrade may end now
    seconds, lines = conversion_seconds(c.ssh("node1", "cat /var/log/slurm/slurmdbd.log"), "26.05.3")
    versions = versions_everywhere(c)
    assert versions == {"node1": "slurm 26.05.3", "node2": "slurm 26.05.3", "node3": "slurm 26.05.3",
                        "scontrol": "Version=26.05.3"}, versions  # fmt: skip
    wait_for("the running job completed", lambda: sacct(c, [running]).get(running) == "COMPLETED", timeout=600)
    after = jobs_in_sacct(c)
    lost = before - after
    assert not lost and running in after, (len(before), len(after), sorted(lost)[:20])  # every earlier job
    print("\n".join(lines))  # before the next apply's checks: a failure there keeps these figures in the log
    print(f"slurm-upgrade 24.11.5 -> 26.05.3: {took:.0f} s in all (the 26.05.3 build included); slurmdbd's "
          f"conversion: {seconds:.0f} s; sacct before {len(before)} jobs, after {len(after)}")  # fmt: skip

    runs = c.state_dir / "runs"
    known = set(runs.glob("*.jsonl"))
    again = c.apply(spec)
    assert again["returncode"] == 0 and again["ok"] and again["changes"] == 0, json.dumps(again, indent=1)[-3000:]
    (log,) = set(runs.glob("*.jsonl")) - known
    events = [json.loads(line) for line in Path(log).read_text().splitlines()]
    assert not [e for e in events if e["event"] in ("drain", "resume")], events
    report = run_cli("validate", str(spec), "--json", env=c.env)
    assert report.returncode == 0, report.stdout[-4000:] + report.stderr[-2000:]
    print("the next apply: 0 changes, nothing drained; validate passed")

"""Benchmark: an acceptance campaign (``gpuforge accept``) on 3, 12, 24 and 48 lab nodes.

For each N: a fresh lab of N nodes, the lab spec applied, stress-ng installed on every node from
the lab mirror, then one campaign (CPU and memory burn-in of ``--seconds`` each, the health step;
``--no-act``: nothing drained) timed from the control host, and its report.html opened in headless
Chromium (``gpuforge.acceptance.browser``, where installed). Prints and writes
``bench/results/accept.json`` and ``bench/results/accept.txt``:

- wall time of the campaign, and the part of it the burn-in itself takes (the steps' seconds);
- the control host's CPU: the ``gpuforge`` process and its ssh children (kernel rusage), in all
  and per node. The target is that it does not grow with N beyond submitting and collecting:
  one SSH session per poll and per job (not per node), so per-node CPU should fall as N grows;
- the load average of this machine when the campaign started (it is shared: read the figures with it).

The lab is ``gfaccept`` on 10.213.23.0/24 (10.213.21.0/24, this script's earlier subnet, is another
lab's on the shared machine).

Needs root and the lab's tools; about 4 minutes per size plus the applies. Run:
``.venv/bin/python bench/accept.py [--nodes 3,12,24] [--seconds 10]`` (48 takes a machine with the
memory for 48 lab nodes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuforge.acceptance import browser  # noqa: E402
from gpuforge.lab import core  # noqa: E402
from gpuforge.lab.spec import lab_spec_data  # noqa: E402

NAME, SUBNET = "gfaccept", "10.213.23.0/24"
RESULTS = REPO / "bench" / "results"
QUIET = lambda _m: None  # noqa: E731
INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends stress-ng"


@dataclass
class Row:
    nodes: int
    wall_s: float
    burn_in_s: int
    control_cpu_s: float
    control_cpu_per_node_ms: float
    exit_code: int
    passed: int
    jobs: int
    campaign_s: float
    load_1m: float
    report_ok: bool | None


def write_spec(state: Any, workdir: Path, nodes: int, seconds: int) -> Path:
    base = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data = lab_spec_data(base, state, {"workers": f"node[2-{nodes}]" if nodes > 2 else "node2"})
    data["acceptance"] = {"steps": {"cpu": {"seconds": seconds, "workers": 1},
                                    "memory": {"seconds": seconds, "percent": 1}}}  # fmt: skip
    path = workdir / f"accept-{nodes}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def gpuforge(args: list[str], env: dict[str, str], log: Path) -> tuple[float, int, str, float]:
    """Run the CLI (stderr to ``log``): wall time, exit status, stdout, CPU of it and its children (ssh)."""
    with tempfile.TemporaryFile() as out, log.open("w") as err:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "gpuforge", *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, env={**os.environ, **env}, cwd=REPO)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.monotonic() - start
        out.seek(0)
        return took, os.waitstatus_to_exitcode(status), out.read().decode(), usage.ru_utime + usage.ru_stime


def install(state: Any, nodes: int) -> None:
    def one(i: int) -> int:
        cmd = core.ssh_command(state, f"node{i}", [INSTALL])
        return subprocess.run(cmd, capture_output=True, stdin=subprocess.DEVNULL).returncode

    with ThreadPoolExecutor(max_workers=nodes) as pool:
        failed = [i for i, rc in zip(range(1, nodes + 1), pool.map(one, range(1, nodes + 1)), strict=True) if rc]
    if failed:
        raise SystemExit(f"stress-ng did not install on node(s) {failed}")


def measure(nodes: int, seconds: int, workdir: Path) -> Row:
    core.down(NAME, log=QUIET)
    state = core.up(NAME, nodes, SUBNET, log=QUIET)
    env = {"GPUFORGE_STATE_DIR": str(workdir / f"state-{nodes}")}
    spec = write_spec(state, workdir, nodes, seconds)
    took, rc, _, _ = gpuforge(["apply", "--yes", str(spec)], env, workdir / f"apply-{nodes}.log")
    if rc != 0:
        raise SystemExit(f"apply on {nodes} nodes failed (exit {rc}): {workdir / f'apply-{nodes}.log'}")
    install(state, nodes)
    # Slurm sees the nodes idle after the apply; give slurmd a moment to register the last ones.
    time.sleep(5)
    load = os.getloadavg()[0]
    log = workdir / f"accept-{nodes}.log"
    took, rc, out, cpu = gpuforge(["accept", str(spec), "--json", "--no-act", "--poll", "2"], env, log)
    if not out.strip():
        raise SystemExit(f"accept on {nodes} nodes printed nothing (exit {rc}): {log}")
    doc = json.loads(out)
    return Row(nodes, round(took, 1), 2 * seconds, round(cpu, 2), round(1000 * cpu / nodes, 1), rc,
               doc["summary"]["pass"], len(doc["groups"]), doc["duration_s"], round(load, 2),
               report_ok(Path(doc["saved"]).with_name("report.html")))  # fmt: skip


def report_ok(page: Path) -> bool | None:
    """The report in headless Chromium: the heat map and every chart drawn (None: no Chromium here)."""
    if browser.find_browser() is None:
        return None
    try:
        found = browser.problems(browser.view(page), [], [])
    except browser.BrowserError as e:
        found = [str(e)]
    for p in found:
        print(f"report {page}: {p}", file=sys.stderr)
    return not found


def table(rows: list[Row]) -> str:
    head = (f"{'N':>3} {'wall s':>7} {'campaign s':>10} {'burn-in s':>9} {'ctl CPU s':>9} {'ms/node':>7} "
            f"{'jobs':>4} {'passed':>6} {'exit':>4} {'load':>5} report")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        shown = {True: "ok", False: "BAD", None: "-"}[r.report_ok]
        lines.append(f"{r.nodes:3d} {r.wall_s:7.1f} {r.campaign_s:10.1f} {r.burn_in_s:9d} {r.control_cpu_s:9.2f} "
                     f"{r.control_cpu_per_node_ms:7.0f} {r.jobs:4d} {r.passed:6d} {r.exit_code:4d} {r.load_1m:5.2f} "
                     f"{shown}")  # fmt: skip
    lines.append("wall s: the gpuforge accept command; campaign s: its own measure (campaign.json); burn-in s: the "
                 "steps' seconds; ctl CPU s: gpuforge and its ssh children (rusage); load: 1-minute load average "
                 "of this 2-core machine at the start; report: report.html checked in headless Chromium")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt(f"signal {s}")))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="3,12,24", help="comma-separated lab sizes (48 needs the memory for it)")
    p.add_argument("--seconds", type=int, default=10, help="seconds of each burn-in step")
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gfaccept-"))
    rows: list[Row] = []
    print(f"work folder (specs, state, campaign folders, logs): {workdir}", flush=True)
    try:
        for n in (int(x) for x in args.nodes.split(",")):
            rows.append(measure(n, args.seconds, workdir))
            r = rows[-1]
            print(f"{r.nodes:3d} nodes: campaign {r.wall_s:6.1f} s (burn-in {r.burn_in_s} s), control host "
                  f"{r.control_cpu_s:5.2f} CPU-s ({r.control_cpu_per_node_ms:.0f} ms/node), {r.jobs} job(s), "
                  f"{r.passed} passed, exit {r.exit_code}", flush=True)  # fmt: skip
            write(rows)  # after every size: a later one that fails keeps the earlier figures
    finally:
        core.down(NAME, log=QUIET)
    print(table(rows))
    return 0


def write(rows: list[Row]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "accept.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    (RESULTS / "accept.txt").write_text(table(rows) + "\n")


if __name__ == "__main__":
    sys.exit(main())

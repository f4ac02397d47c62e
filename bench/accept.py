"""Benchmark: an acceptance campaign (``gpuforge accept``) on 3, 12, 24 and 48 lab nodes.

For each N: a fresh lab of N nodes, the lab spec applied, stress-ng installed on every node from
the lab mirror, then one campaign (CPU and memory burn-in of ``--seconds`` each, the health step;
``--no-act``: nothing drained) timed from the control host. Prints and writes
``bench/results/accept.json``:

- wall time of the campaign, and the part of it the burn-in itself takes (the steps' seconds);
- the control host's CPU: the ``gpuforge`` process and its ssh children (kernel rusage), in all
  and per node. The target is that it does not grow with N beyond submitting and collecting:
  one SSH session per poll and per job (not per node), so per-node CPU should fall as N grows.

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

from gpuforge.lab import core  # noqa: E402
from gpuforge.lab.spec import lab_spec_data  # noqa: E402

NAME, SUBNET = "gfaccept", "10.213.21.0/24"
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


def write_spec(state: Any, workdir: Path, nodes: int, seconds: int) -> Path:
    base = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data = lab_spec_data(base, state, {"workers": f"node[2-{nodes}]" if nodes > 2 else "node2"})
    data["acceptance"] = {"steps": {"cpu": {"seconds": seconds, "workers": 1},
                                    "memory": {"seconds": seconds, "percent": 1}}}  # fmt: skip
    path = workdir / f"accept-{nodes}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def gpuforge(args: list[str], env: dict[str, str]) -> tuple[float, int, str, float]:
    """Run the CLI: wall time, exit status, stdout, CPU of it and its children (ssh) from rusage."""
    with tempfile.TemporaryFile() as out:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "gpuforge", *args], stdout=out, stderr=subprocess.DEVNULL,
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
    took, rc, _, _ = gpuforge(["apply", "--yes", str(spec)], env)
    if rc != 0:
        raise SystemExit(f"apply on {nodes} nodes failed (exit {rc})")
    install(state, nodes)
    # Slurm sees the nodes idle after the apply; give slurmd a moment to register the last ones.
    time.sleep(5)
    took, rc, out, cpu = gpuforge(["accept", str(spec), "--json", "--no-act", "--poll", "2"], env)
    doc = json.loads(out)
    return Row(nodes, round(took, 1), 2 * seconds, round(cpu, 2), round(1000 * cpu / nodes, 1), rc,
               doc["summary"]["pass"], len(doc["groups"]))  # fmt: skip


def main() -> int:
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt(f"signal {s}")))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="3,12,24", help="comma-separated lab sizes (48 needs the memory for it)")
    p.add_argument("--seconds", type=int, default=10, help="seconds of each burn-in step")
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gfaccept-"))
    rows: list[Row] = []
    try:
        for n in (int(x) for x in args.nodes.split(",")):
            rows.append(measure(n, args.seconds, workdir))
            r = rows[-1]
            print(f"{r.nodes:3d} nodes: campaign {r.wall_s:6.1f} s (burn-in {r.burn_in_s} s), control host "
                  f"{r.control_cpu_s:5.2f} CPU-s ({r.control_cpu_per_node_ms:.0f} ms/node), {r.jobs} job(s), "
                  f"{r.passed} passed, exit {r.exit_code}", flush=True)  # fmt: skip
    finally:
        core.down(NAME, log=QUIET)
    out = REPO / "bench" / "results" / "accept.json"
    out.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

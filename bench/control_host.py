"""What the control host spends per node: plan and first apply of N simulated nodes.

The nodes are ``tests/converge/simulated.py``'s: a pyinfra connector that answers every
command at once as a fresh machine, so what is measured is gpuforge's and pyinfra's own work
on the control host (rendering, facts, planning, operations, results), without SSH or the
nodes' time. The spec is ``inventories/slurm-h100.yaml`` with its GPU group resized to N.
Each N runs in its own process (clean peak RSS). Prints a table and the per-node slopes.

    python bench/control_host.py [--nodes 8,32,128,240]

Not measured here: SSH (one connection per node, held for the run; the lab benchmarks
``bench/apply_slurm.py`` and ``bench/validate.py`` include it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def spec_for(gpu_nodes: int, where: Path) -> Path:
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    for group in data["node_groups"]:
        if group["name"] == "gpu":
            group["hosts"] = f"gpu[001-{gpu_nodes:03d}]" if gpu_nodes > 1 else "gpu001"
            group["address_start"] = "198.51.100.1"  # documentation range: at most 250 GPU nodes
            group["leaf_switch"] = "leaf1"
        if group["name"] == "mig":
            group["hosts"] = "mig[01-04]"
    for part in data["slurm"]["partitions"]:
        if part["name"] == "debug":
            part["nodes"] = "gpu001"
    sys.path.insert(0, str(REPO))
    from tests.converge.simulated import write_simulated_spec

    return write_simulated_spec(data, where, "bench.yaml")


def one(gpu_nodes: int) -> dict[str, float]:
    """Measure in this process (called in a child): plan, then the first apply."""
    import pytest

    sys.path.insert(0, str(REPO))
    from gpuforge.orchestrate.apply import run_deploys
    from gpuforge.orchestrate.plan import plan
    from gpuforge.spec.cluster import load_cluster
    from tests.converge.simulated import simulated

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        os.environ["GPUFORGE_STATE_DIR"] = str(where / "state")
        path = spec_for(gpu_nodes, where)
        mp = pytest.MonkeyPatch()
        cluster = simulated(mp, where)
        t0, c0 = time.perf_counter(), time.process_time()
        loaded = load_cluster(path)
        result = plan(loaded)
        t1, c1 = time.perf_counter(), time.process_time()
        assert result.ok, result.errors
        applied = run_deploys(loaded)
        t2, c2 = time.perf_counter(), time.process_time()
        assert applied.ok, {n: h.error for n, h in applied.hosts.items() if h.error}
        mp.undo()
        nodes = len(applied.hosts)
        sent = sum(len(c) for c in cluster.commands.values())
    return {
        "nodes": nodes,
        "plan_s": t1 - t0,
        "plan_cpu_s": c1 - c0,
        "apply_s": t2 - t1,
        "apply_cpu_s": c2 - c1,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "commands": sent,
    }


def slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="8,32,128,240", help="GPU node counts (the spec adds 10 others)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one)))
        return 0
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        cp = subprocess.run(
            [sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, cwd=REPO, check=False
        )
        if cp.returncode != 0:
            print(cp.stdout + cp.stderr, file=sys.stderr)
            return 1
        rows.append(json.loads(cp.stdout.strip().splitlines()[-1]))
    print(f"{'nodes':>6} {'plan s':>8} {'plan cpu':>9} {'apply s':>8} {'apply cpu':>10} {'peak MB':>8} {'commands':>9}")
    for r in rows:
        print(
            f"{r['nodes']:>6} {r['plan_s']:>8.2f} {r['plan_cpu_s']:>9.2f} {r['apply_s']:>8.2f} "
            f"{r['apply_cpu_s']:>10.2f} {r['peak_rss_mb']:>8.0f} {r['commands']:>9}"
        )
    xs = [float(r["nodes"]) for r in rows]
    print(
        "per node: plan {:.1f} ms CPU, first apply {:.1f} ms CPU, {:.2f} MB peak memory".format(
            1000 * slope(xs, [r["plan_cpu_s"] for r in rows]),
            1000 * slope(xs, [r["apply_cpu_s"] for r in rows]),
            slope(xs, [r["peak_rss_mb"] for r in rows]),
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

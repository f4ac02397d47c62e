"""Benchmark: ``gpuforge validate`` on lab nodes and ``gpuforge health`` on one node.

Prints:
- every fast check (all of them: dcgm diag is off in the lab spec) on all nodes of the spec,
  median of N runs; target under 5 s for 3 nodes;
- ``gpuforge-health`` on one node (the installed program, as slurmd runs it): time on the
  node itself and with the SSH round trip, median of N runs; target under 2 s.

Needs a running lab with the spec applied (``gpuforge lab up`` + ``gpuforge apply``), e.g.
``python bench/validate.py --spec lab-spec.yaml [--node node2] [--runs 5]``.
The lab tests call :func:`run` on their own lab and print the same figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuforge.render.health import HEALTH_PROGRAM  # noqa: E402
from gpuforge.spec import resolve_nodes  # noqa: E402
from gpuforge.spec.cluster import load_cluster  # noqa: E402
from gpuforge.validator.runner import NO_SECRET_KEX_OPTION, SshTransport, validate  # noqa: E402


def bench_validate(spec_path: Path, runs: int) -> dict[str, Any]:
    """Wall time of a full validate (all checks, all nodes)."""
    cluster = load_cluster(spec_path)
    spec = cluster.spec
    times, counts = [], {}
    for _ in range(runs):
        t0 = time.monotonic()
        report = validate(cluster)
        times.append(time.monotonic() - t0)
        counts = report.counts()
    return {
        "nodes": len(resolve_nodes(spec)),
        "checks": sum(counts.values()),
        "results": counts,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
    }


def bench_health(spec_path: Path, node_name: str, runs: int) -> dict[str, Any]:
    """gpuforge-health on one node: its own duration and the SSH round trip around it."""
    cluster = load_cluster(spec_path)
    node = next(n for n in resolve_nodes(cluster.spec) if n.name == node_name)
    transport = SshTransport(cluster, options=NO_SECRET_KEX_OPTION)  # as validate connects
    on_node, round_trip = [], []
    for _ in range(runs):
        done = transport.run(node, f"{HEALTH_PROGRAM} --json --no-slurm", None, 60)
        if done.rc not in (0, 1):
            raise RuntimeError(f"{HEALTH_PROGRAM} on {node_name}: exit {done.rc}: {done.stderr.strip()}")
        doc = json.loads(done.stdout.strip().splitlines()[-1])
        on_node.append(float(doc["duration_s"]))
        round_trip.append(done.duration_s)
    return {
        "node": node_name,
        "on_node_median_s": statistics.median(on_node),
        "on_node_max_s": max(on_node),
        "ssh_round_trip_median_s": statistics.median(round_trip),
    }


def run(spec_path: Path, node_name: str = "node2", runs: int = 3) -> dict[str, Any]:
    """Both figures, printed and returned."""
    v = bench_validate(spec_path, runs)
    h = bench_health(spec_path, node_name, max(runs, 3))
    print(
        f"validate: {v['nodes']} nodes, {v['checks']} check results {v['results']}: "
        f"median {v['median_s']:.2f} s (min {v['min_s']:.2f}, max {v['max_s']:.2f}; target < 5 s)"
    )
    print(
        f"health on {h['node']}: {h['on_node_median_s']:.2f} s on the node (max {h['on_node_max_s']:.2f}), "
        f"{h['ssh_round_trip_median_s']:.2f} s with the SSH round trip (target < 2 s)"
    )
    return {"validate": v, "health": h}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", type=Path, required=True, help="spec of a running, applied lab")
    p.add_argument("--node", default="node2", help="node for the health figure")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    run(args.spec, args.node, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: package downloads on N lab nodes through one site mirror, at several concurrency bounds.

Issue 18 asked whether bounding how many nodes fetch through one mirror at once makes first applies
reliable, and which bound is fastest. For each bound K (default: N, i.e. unbounded as gpuforge
runs, 16, 8 and 4) and each trial, every node drops its package lists and downloaded archives,
then the nodes run, at most K at a time, gpuforge's own ``apt-get update``
(``gpuforge.deploy.apt.APT_UPDATE``: partial updates are errors, retried with backoff, a stalled one
ended by the watchdog) followed by ``apt-get install --download-only`` of the minimal Slurm spec's
packages. Bounds are interleaved across trials so that a change in the mirror's upstream hits all
of them alike. Per run: wall time, slowest and median node, watchdog interventions ("stalls"),
failed nodes, and lines apt-cacher-ng added to its error log.

Run as root: ``python bench/mirror_concurrency.py [--nodes 48] [--bounds 48,16,8,4] [--trials 2]``.
Its lab is ``gfmirror`` on 10.213.23.0/24, always torn down. Writes
``bench/results/mirror_concurrency.{txt,json}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scale import mirror_errors  # noqa: E402  (bench/ is on sys.path when run as a script)

from gpuforge.deploy.apt import APT_ENV, APT_NET, APT_UPDATE, UPDATE_STALL_S  # noqa: E402
from gpuforge.lab import core  # noqa: E402
from gpuforge.lab.lab_record import LabState  # noqa: E402

NAME, SUBNET = "gfmirror", "10.213.23.0/24"
RESULTS = REPO / "bench" / "results"
#: The minimal Slurm spec's packages (``inventories/lab-slurm-minimal.yaml``: munge, slurmctld, slurmd).
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
RESET = "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin && apt-get clean"
DOWNLOAD = f"{APT_ENV} apt-get -q -y {APT_NET} --no-install-recommends --download-only install"
FETCH = f"{APT_UPDATE} && {DOWNLOAD} {' '.join(PACKAGES)}"
STALL_MARK = "made no progress"
QUIET = lambda m: None  # noqa: E731


@dataclass
class Run:
    bound: int
    trial: int
    wall_s: float = 0.0
    slowest_node_s: float = 0.0
    median_node_s: float = 0.0
    stalls: int = 0
    failed: list[str] = field(default_factory=list)
    mirror_errors: int = 0


def on_node(state: LabState, node: str, command: str) -> tuple[str, int, str, float]:
    """(node, exit status, stderr, seconds) of ``command`` over SSH."""
    start = time.monotonic()
    cp = subprocess.run(
        core.ssh_command(state, node, [command]), capture_output=True, stdin=subprocess.DEVNULL, text=True
    )
    return node, cp.returncode, cp.stderr, time.monotonic() - start


def measure(state: LabState, nodes: list[str], bound: int, trial: int) -> Run:
    with ThreadPoolExecutor(len(nodes)) as pool:
        reset = list(pool.map(lambda n: on_node(state, n, RESET), nodes))
    if any(rc for _, rc, _, _ in reset):
        raise SystemExit(f"resetting the nodes' lists failed: {[n for n, rc, _, _ in reset if rc]}")
    errors = mirror_errors(NAME)
    start = time.monotonic()
    with ThreadPoolExecutor(bound) as pool:
        results = list(pool.map(lambda n: on_node(state, n, FETCH), nodes))
    times = [t for _, _, _, t in results]
    return Run(
        bound,
        trial,
        wall_s=round(time.monotonic() - start, 1),
        slowest_node_s=round(max(times), 1),
        median_node_s=round(statistics.median(times), 1),
        stalls=sum(err.count(STALL_MARK) for _, _, err, _ in results),
        failed=[n for n, rc, _, _ in results if rc],
        mirror_errors=mirror_errors(NAME) - errors,
    )


def table(runs: list[Run], nodes: int) -> str:
    head = (
        f"{'bound':>5} {'trial':>5} {'wall s':>7} {'slowest s':>9} {'median s':>8} "
        f"{'stalls':>6} {'failed':>6} {'m.err':>5}"
    )
    lines = [
        f"{nodes} lab nodes: apt-get update (gpuforge's) + download of {' '.join(PACKAGES)}, at most 'bound' "
        f"nodes at once; stalls: updates the watchdog ended after {UPDATE_STALL_S} s without progress; "
        "m.err: lines in the mirror's error log",
        head,
        "-" * len(head),
    ]
    for r in runs:
        lines.append(
            f"{r.bound:5d} {r.trial:5d} {r.wall_s:7.1f} {r.slowest_node_s:9.1f} {r.median_node_s:8.1f} "
            f"{r.stalls:6d} {len(r.failed):6d} {r.mirror_errors:5d}"
        )
    lines.append("")
    for bound in dict.fromkeys(r.bound for r in runs):
        mine = [r for r in runs if r.bound == bound]
        lines.append(
            f"bound {bound:3d}: mean wall {statistics.mean(r.wall_s for r in mine):6.1f} s, "
            f"stalls {sum(r.stalls for r in mine)}, failed nodes {sum(len(r.failed) for r in mine)}, "
            f"mirror errors {sum(r.mirror_errors for r in mine)} in {len(mine)} run(s)"
        )
    return "\n".join(lines)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so the lab is torn down in ``finally``


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=48)
    ap.add_argument("--bounds", default="", help="comma-separated (default: N,16,8,4)")
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args()
    bounds = [int(b) for b in args.bounds.split(",")] if args.bounds else [args.nodes, 16, 8, 4]
    if args.nodes < 2 or args.trials < 1 or any(b < 1 or b > args.nodes for b in bounds):
        ap.error("--nodes >= 2, --trials >= 1, every bound between 1 and --nodes")
    names = [f"node{i}" for i in range(1, args.nodes + 1)]
    runs: list[Run] = []
    try:
        core.down(NAME, log=QUIET)
        state = core.up(NAME, args.nodes, SUBNET, log=QUIET)
        # The mirror's cache warm, as for the apply and the floor of bench/scale.py.
        if on_node(state, "node1", FETCH)[1]:
            raise SystemExit("warming the mirror failed")
        for trial in range(1, args.trials + 1):
            for bound in bounds:
                runs.append(measure(state, names, bound, trial))
                print(table(runs[-1:], args.nodes).splitlines()[3], flush=True)
    finally:
        core.down(NAME, log=QUIET)
    text = table(runs, args.nodes)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "mirror_concurrency.txt").write_text(text + "\n")
    (RESULTS / "mirror_concurrency.json").write_text(
        json.dumps({"nodes": args.nodes, "packages": PACKAGES, "runs": [asdict(r) for r in runs]}, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

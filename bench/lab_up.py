"""Benchmark: `lab up` of 3 nodes from a cached rootfs, and the memory each idle node takes.

Run as root: ``python bench/lab_up.py``. It builds the rootfs first if it is not cached (not
timed), brings up its own lab (``gflab-bench``, 10.213.11.0/24), measures, and always tears it down.
Targets: `up` under 20 s; under 80 MB per idle node.
"""

from __future__ import annotations

import argparse
import sys
import time

from gpuforge.lab import core
from gpuforge.lab.rootfs import ensure_rootfs
from gpuforge.lab.sources import SUITE
from gpuforge.lab.system import children, rss_kib

UP_TARGET_S = 20.0
MEM_TARGET_MB = 80.0


def pss_kib(pids: list[int]) -> int:
    """Sum of proportional set sizes (shared pages split between their users)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="gflab-bench")
    ap.add_argument("--subnet", default="10.213.11.0/24")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds to let nodes settle before measuring")
    args = ap.parse_args()
    quiet = lambda m: None  # noqa: E731

    ensure_rootfs(SUITE)  # warm-up build (cached afterwards), not timed
    core.down(args.name, log=quiet)
    try:
        t0 = time.monotonic()
        core.up(args.name, args.nodes, args.subnet, log=quiet)
        up_s = time.monotonic() - t0
        t0 = time.monotonic()
        core.up(args.name, args.nodes, args.subnet, log=quiet)
        noop_s = time.monotonic() - t0
        time.sleep(args.idle)
        rows = []
        for node, pid in sorted(core.node_pids(args.name).items()):
            procs = children(pid)  # the container's processes (its systemd and everything below)
            rows.append((node, len(procs), rss_kib(procs) / 1024, pss_kib(procs) / 1024, rss_kib([pid]) / 1024))
    finally:
        t0 = time.monotonic()
        core.down(args.name, log=quiet)
        down_s = time.monotonic() - t0

    ok = up_s < UP_TARGET_S
    verdict = "OK" if ok else "MISSED"
    print(f"lab up, {args.nodes} nodes, cached rootfs: {up_s:6.1f} s   (target < {UP_TARGET_S:.0f} s) {verdict}")
    print(f"lab up again (no-op):               {noop_s:6.1f} s")
    print(f"lab down:                           {down_s:6.1f} s")
    print(f"idle node memory after {args.idle:.0f} s (target < {MEM_TARGET_MB:.0f} MB per node, RSS sum):")
    for node, n, rss, pss, nspawn in rows:
        flag = "OK" if rss < MEM_TARGET_MB else "MISSED"
        print(f"  {node}: {n:2d} processes  RSS {rss:5.1f} MB  PSS {pss:5.1f} MB  {flag}")
        print(f"         (+ its systemd-nspawn process on the host: RSS {nspawn:.1f} MB)")
        ok = ok and rss < MEM_TARGET_MB
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

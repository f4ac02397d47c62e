"""Benchmark: what validate's ``config`` layer (drift: every managed file's digest, owner and mode
in one round trip per node, diffs only for drifted files) adds to ``gpuforge validate``, at N lab
nodes of the full lab spec, beside validate without it, and the health check's drift check on a node.

For each N (default 3, 48): ``lab up`` N nodes, ``gpuforge apply``, then the median of ``--runs``
runs of ``validate`` (all checks), ``validate --checks config`` alone and ``validate`` of every
other layer; then ``gpuforge-health --checks config.files_intact`` on one node (as slurmd runs it).
Writes ``bench/results/validate_config.json`` and ``.txt``. Run as root:
``python bench/validate_config.py [--sizes 3,48] [--runs 3]``; its lab (``gfscale``) is always
torn down at the end. Target: the config layer adds at most 2 s to validate at 48 nodes.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from scale import NAME, QUIET, SUBNET, _terminate, gpuforge, lab_spec  # noqa: E402

from gpuforge.lab import core  # noqa: E402
from gpuforge.validator.node.base import LAYERS  # noqa: E402

RESULTS = REPO / "bench" / "results"
TARGET_ADDED_S = 2.0
OTHER_LAYERS = ",".join(layer for layer in LAYERS if layer not in ("config", "site"))


def median_s(args: list[str], env: dict[str, str], runs: int) -> tuple[float, bool]:
    """Median wall time of ``gpuforge <args>`` and whether every run passed."""
    times, ok = [], True
    for _ in range(runs):
        t = gpuforge(*args, env=env)
        times.append(t.seconds)
        ok = ok and t.rc == 0
    return statistics.median(times), ok


def health_s(state: Any, node: str, runs: int) -> float:
    """Median wall time of the drift check on ``node`` itself (no SSH in the figure: ``time`` there)."""
    cmd = (
        "python3 -c 'import subprocess, time; t = time.monotonic(); "
        'subprocess.run(["/usr/local/sbin/gpuforge-health", "--no-slurm", "--checks", "config.files_intact"], '
        "capture_output=True); print(time.monotonic() - t)'"
    )
    out = []
    for _ in range(runs):
        cp = subprocess.run(core.ssh_command(state, node, [cmd]), capture_output=True, text=True, check=True)
        out.append(float(cp.stdout.strip().splitlines()[-1]))
    return statistics.median(out)


def measure(nodes: int, runs: int, workdir: Path) -> dict[str, Any]:
    core.down(NAME, log=QUIET)
    state = core.up(NAME, nodes, SUBNET, log=QUIET)
    path = lab_spec("lab", state, workdir, nodes)
    env = {"GPUFORGE_STATE_DIR": str(workdir / f"state-{nodes}")}
    applied = gpuforge("apply", "--yes", str(path), env=env)
    if applied.rc != 0:
        raise SystemExit(f"apply of {nodes} nodes failed: {applied.err[-2000:]}")
    full, full_ok = median_s(["validate", str(path)], env, runs)
    config, config_ok = median_s(["validate", str(path), "--checks", "config"], env, runs)
    others, _ = median_s(["validate", str(path), "--checks", OTHER_LAYERS], env, runs)
    return {
        "nodes": nodes,
        "validate_s": round(full, 2),
        "validate_ok": full_ok,
        "config_only_s": round(config, 2),
        "config_ok": config_ok,
        "without_config_s": round(others, 2),
        "added_by_config_s": round(full - others, 2),
        "health_drift_check_s": round(health_s(state, "node2", runs), 3),
    }


def report(rows: list[dict[str, Any]]) -> str:
    head = f"{'N':>3} {'validate s':>10} {'without config s':>16} {'config only s':>13} {'added s':>7} {'health s':>8}"
    head += " ok"
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = "yes" if r["validate_ok"] and r["config_ok"] else "NO"
        lines.append(
            f"{r['nodes']:3d} {r['validate_s']:10.2f} {r['without_config_s']:16.2f} {r['config_only_s']:13.2f} "
            f"{r['added_by_config_s']:7.2f} {r['health_drift_check_s']:8.3f} {ok}"
        )
    big = max(rows, key=lambda r: r["nodes"])
    verdict = "OK" if big["added_by_config_s"] <= TARGET_ADDED_S else "MISSED"
    added = big["added_by_config_s"]
    lines.append(f"{big['nodes']} nodes: the config layer adds {added:.2f} s <= {TARGET_ADDED_S} s: {verdict}")
    return "\n".join(lines)


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3,48", help="node counts, comma-separated")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (the median is kept)")
    args = ap.parse_args()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="gfbench-") as tmp:
            for n in sorted(int(s) for s in args.sizes.split(",")):
                rows.append(measure(n, args.runs, Path(tmp)))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        core.down(NAME, log=QUIET)
    text = report(rows)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "validate_config.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "validate_config.txt").write_text(text + "\n")
    print("wrote bench/results/validate_config.json and bench/results/validate_config.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())

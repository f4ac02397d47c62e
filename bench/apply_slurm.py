"""Benchmark: Slurm apply on lab nodes, against a plain apt-get floor measured in the same run.

Prints:
- first apply on 3 fresh nodes vs the floor (``apt-get install`` of the same packages on one
  fresh node, mirror cache warm for both); target ratio <= 1.5;
- no-op re-apply on 3 nodes (median of 3); target < 3 s;
- no-op re-apply as the lab grows (3, 6, 12 nodes); target: 12 nodes < 2x the 3-node time.

Needs root and the lab's tools. Run: ``python bench/apply_slurm.py [--max-nodes 12]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuforge.lab import core  # noqa: E402
from gpuforge.lab.spec import lab_spec_data  # noqa: E402

NAME, SUBNET = "gfbench", "10.213.5.0/24"
PACKAGES = "munge slurmctld slurmd slurm-client slurmdbd mariadb-server prometheus prometheus-node-exporter"


def gpuforge(*args: str, env: dict[str, str]) -> float:
    start = time.monotonic()
    cp = subprocess.run(
        [sys.executable, "-m", "gpuforge", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=REPO,
    )
    took = time.monotonic() - start
    if cp.returncode != 0:
        raise SystemExit(f"gpuforge {' '.join(args)} failed:\n{cp.stdout}\n{cp.stderr}")
    return took


def ssh(state: object, node: str, cmd: str) -> float:
    start = time.monotonic()
    subprocess.run(core.ssh_command(state, node, [cmd]), check=True, capture_output=True)  # type: ignore[arg-type]
    return time.monotonic() - start


def write_spec(state: object, workdir: Path, workers: int) -> Path:
    base = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    hosts = f"node[2-{workers + 1}]" if workers > 1 else "node2"
    data = lab_spec_data(base, state, {"workers": hosts})  # type: ignore[arg-type]
    path = workdir / f"spec-{workers + 1}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def noop(spec: Path, env: dict[str, str], runs: int = 3) -> float:
    return statistics.median(gpuforge("apply", "--yes", str(spec), env=env) for _ in range(runs))


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so the lab is torn down in ``finally``


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-nodes", type=int, default=12)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gfbench-"))
    env = {"GPUFORGE_STATE_DIR": str(workdir / "state")}
    figures: dict[str, float] = {}
    try:
        core.down(NAME, log=lambda m: None)
        state = core.up(NAME, 4, SUBNET, log=lambda m: None)
        # Warm the mirror cache so the floor and the apply download the same way.
        ssh(
            state,
            "node4",
            f"apt-get -q update && apt-get install -y -q --download-only --no-install-recommends {PACKAGES}",
        )
        ssh(state, "node4", "apt-get clean")
        figures["floor_s"] = ssh(
            state,
            "node4",
            f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {PACKAGES} "
            "|| (apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
            f"{PACKAGES})",
        )
        spec3 = write_spec(state, workdir, 2)
        figures["first_apply_3_s"] = gpuforge("apply", "--yes", str(spec3), env=env)
        figures["ratio"] = figures["first_apply_3_s"] / figures["floor_s"]
        figures["noop_3_s"] = noop(spec3, env)
        for total in (6, 12):
            if total > args.max_nodes:
                break
            state = core.up(NAME, total, SUBNET, log=lambda m: None)
            spec = write_spec(state, workdir, total - 1)
            gpuforge("apply", "--yes", str(spec), env=env)
            figures[f"noop_{total}_s"] = noop(spec, env)
    finally:
        core.down(NAME, log=lambda m: None)
    print(json.dumps({k: round(v, 2) for k, v in figures.items()}, indent=2))
    print(f"first apply / floor: {figures['ratio']:.2f} (target <= 1.5)")
    print(f"no-op re-apply, 3 nodes: {figures['noop_3_s']:.2f} s (target < 3 s)")
    for total in (6, 12):
        if f"noop_{total}_s" in figures:
            print(
                f"no-op re-apply, {total} nodes: {figures[f'noop_{total}_s']:.2f} s "
                f"({figures[f'noop_{total}_s'] / figures['noop_3_s']:.2f}x the 3-node time; target for 12: < 2x)"
            )


if __name__ == "__main__":
    main()

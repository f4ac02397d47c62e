"""Benchmark: time to a validated N-node cluster booted from a baked image vs from scratch.

Run as root: ``python bench/image.py --nodes 12``. Own labs only: ``gfimgb`` (10.213.22.0/24;
the image lab test uses the same subnet, so do not run both at once) and the build's ``gfimg``
(10.213.21.0/24), always torn down. Steps, each timed: (1) lab up (stock) + apply + validate of
inventories/lab.yaml with N-1 workers (from scratch); (2) ``gpuforge image build`` of the workers
group (shown separately); (3) lab up from the image + apply + validate. Writes
bench/results/image.txt and image.json, and the plot bench/results/image.png (needs
``pip install '.[bench]'``; ``--no-plot`` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gpuforge.lab import core
from gpuforge.lab.spec import lab_spec_data

REPO = Path(__file__).resolve().parents[1]
NAME, SUBNET = "gfimgb", "10.213.22.0/24"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuforge", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO, timeout=3600, stdin=subprocess.DEVNULL)  # fmt: skip


def cluster_run(nodes: int, image: str | None, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """lab up, apply, validate: seconds of each, and the changes of the apply."""
    core.down(NAME, log=lambda m: None)
    try:
        t0 = time.monotonic()
        state = core.up(NAME, nodes, SUBNET, log=lambda m: None, image=image)
        up = time.monotonic() - t0
        base = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
        spec = work / "spec.yaml"
        spec.write_text(yaml.safe_dump(lab_spec_data(base, state, {"workers": f"node[2-{nodes}]"}), sort_keys=False))
        t1 = time.monotonic()
        applied = cli(env, "apply", "--yes", str(spec), "--json")
        apply_s = time.monotonic() - t1
        result = json.loads(applied.stdout)
        t2 = time.monotonic()
        valid = cli(env, "validate", str(spec), "--json")
        validate_s = time.monotonic() - t2
        changes = sum(len(h["changed"]) for h in result["hosts"].values())
        ok = applied.returncode == 0 and valid.returncode == 0
        return {"up_s": up, "apply_s": apply_s, "validate_s": validate_s, "changes": changes, "ok": ok,
                "total_s": up + apply_s + validate_s, "spec": str(spec)}  # fmt: skip
    finally:
        core.down(NAME, log=lambda m: None)


def plot(results: dict[str, Any], path: Path) -> None:
    """Stacked bars: lab up, apply, validate from scratch and from the image; the build beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = ["from scratch", "from image", "image build (once)"]
    bottom = [0.0, 0.0, 0.0]
    for key, name in (("up_s", "lab up"), ("apply_s", "first apply"), ("validate_s", "validate")):
        heights = [results["scratch"][key], results["image"][key], 0.0]
        ax.bar(labels, heights, bottom=bottom, label=name)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.bar(labels, [0.0, 0.0, results["build_s"]], label="image build")
    ax.set(ylabel="seconds", title=f"{results['nodes']} lab nodes to a validated cluster (2 shared cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=12)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "image.txt"))
    ap.add_argument("--no-plot", action="store_true", help="no image.png (no matplotlib needed)")
    args = ap.parse_args()
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("the plot needs matplotlib: pip install '.[bench]' (or --no-plot)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {"GPUFORGE_STATE_DIR": str(work / "state")}
        scratch = cluster_run(args.nodes, None, work, env)
        t0 = time.monotonic()
        built = cli(env, "image", "build", scratch["spec"], "--group", "workers", "-o", str(work / "img"),
                    "--format", "rootfs,oci")  # fmt: skip
        build_s = time.monotonic() - t0
        if built.returncode != 0:
            print(built.stderr, file=sys.stderr)
            return 1
        baked = cluster_run(args.nodes, str(work / "img" / "oci"), work, env)
    lines = [
        f"# bench/image.py --nodes {args.nodes} (2 shared cores; lab nodes; Debian 12; inventories/lab.yaml)",
        f"image build (workers group, once): {build_s:.1f} s",
        f"{'':16}{'lab up':>9}{'apply':>9}{'validate':>10}{'total':>9}{'changes':>9}  ok",
    ]
    for label, r in (("from scratch", scratch), ("from image", baked)):
        lines.append(f"{label:16}{r['up_s']:9.1f}{r['apply_s']:9.1f}{r['validate_s']:10.1f}{r['total_s']:9.1f}"
                     f"{r['changes']:9d}  {r['ok']}")  # fmt: skip
    lines.append(f"ratio (image / scratch, to a validated cluster): {baked['total_s'] / scratch['total_s']:.2f}")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    runs = {k: {f: v for f, v in r.items() if f != "spec"} for k, r in (("scratch", scratch), ("image", baked))}
    results = {"nodes": args.nodes, "build_s": build_s, **runs}  # no path of this machine in the results
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    if not args.no_plot:
        plot(results, Path(args.out).with_suffix(".png"))
    return 0 if scratch["ok"] and baked["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: how gpuforge's cost grows with the lab's node count, against a floor measured in the same run.

For each spec (``minimal``: munge + slurmctld + slurmd, ``inventories/lab-slurm-minimal.yaml``;
``lab``: the full lab spec, ``inventories/lab.yaml``) and each N (default 3, 12, 24, 48):

1. ``lab up`` of N nodes (time; memory of each idle node, RSS of its processes);
2. ``gpuforge plan --json`` on those fresh nodes gives each node's own package set;
3. the floor: plain ``apt-get update && apt-get install`` of that set on all N nodes at once,
   through the same site mirror (its cache warm, as it is for the apply); the update is
   gpuforge's own (``gpuforge.deploy.apt.APT_UPDATE``: retried, a stalled one ended), since a
   bare apt-get update can hang for ever through apt-cacher-ng when many nodes update at once;
4. ``lab down`` and ``lab up`` again: fresh nodes;
5. the first ``gpuforge apply`` (time, failed nodes, the control host's peak RSS), which must
   converge in this one run; then a no-op re-apply (must change nothing) and ``gpuforge validate``.

It prints a table and the targets at the largest N, and writes ``bench/results/scale.json`` and
``bench/results/scale.png`` (time against N for each figure; needs ``pip install '.[bench]'``).
Run as root: ``python bench/scale.py [--sizes 3,12,24,48] [--specs minimal,lab]``. Its lab is
``gfscale`` on 10.213.20.0/24, always torn down at the end.
Targets at 48 nodes: first apply converges in one run with 0 failed nodes at <= 1.2x the floor;
no-op re-apply <= 6 s; validate <= 8 s; lab up <= 30 s.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuforge.deploy.apt import APT_ENV, APT_UPDATE  # noqa: E402
from gpuforge.lab import core  # noqa: E402
from gpuforge.lab.lab_record import LabPaths  # noqa: E402
from gpuforge.lab.spec import write_lab_spec  # noqa: E402
from gpuforge.lab.system import children, rss_kib  # noqa: E402

NAME, SUBNET = "gfscale", "10.213.20.0/24"
SPECS = {"minimal": REPO / "inventories" / "lab-slurm-minimal.yaml", "lab": REPO / "inventories" / "lab.yaml"}
RESULTS = REPO / "bench" / "results"
TARGETS = {"apply_over_floor": 1.2, "noop_s": 6.0, "validate_s": 8.0, "up_s": 30.0}
QUIET = lambda m: None  # noqa: E731
LEGEND = """\
up s: lab up of fresh nodes; idle MB: RSS of one idle node's processes; floor s: apt-get update + install of
each node's packages on all nodes at once; apply s: the first gpuforge apply; ratio: apply / floor; failed: nodes
failed in the floor or the apply; m.err: lines apt-cacher-ng added to its error log meanwhile; ctl MB / ctl cpu:
the apply's peak RSS and CPU seconds on this machine; no-op s, its ctl cpu and all cpu (every process here, lab
nodes included, during the no-op); chg: changes the no-op made; valid s / ok: gpuforge validate; node MB: RSS of
one node running the stack."""


@dataclass
class Row:
    spec: str
    nodes: int
    up_s: float = 0.0
    idle_node_mb: float = 0.0
    floor_s: float = 0.0
    floor_failed: int = 0
    floor_mirror_errors: int = 0
    apply_s: float = 0.0
    apply_failed: list[str] = field(default_factory=list)
    apply_mirror_errors: int = 0
    apply_rss_mb: float = 0.0
    apply_cpu_s: float = 0.0
    noop_s: float = 0.0
    noop_cpu_s: float = 0.0
    noop_host_cpu_s: float = 0.0
    noop_changes: int = 0
    validate_s: float = 0.0
    validate_ok: bool = False
    stack_node_mb: float = 0.0

    @property
    def ratio(self) -> float:
        return self.apply_s / self.floor_s if self.floor_s else 0.0


@dataclass
class Timed:
    seconds: float
    rc: int
    out: str
    err: str
    max_rss_mb: float
    cpu_s: float  # the gpuforge process's own CPU (user + system)
    host_cpu_s: float  # CPU every process on this machine used meanwhile (lab nodes included)


def busy_cpu_s() -> float:
    """CPU seconds this machine has spent busy since boot, all cores (/proc/stat: all but idle, iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def gpuforge(*args: str, env: dict[str, str]) -> Timed:
    """Run the CLI; its time, exit status, output, peak RSS and CPU (from the kernel's rusage)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        busy = busy_cpu_s()
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuforge", *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            cwd=REPO,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.monotonic() - start
        host_cpu = busy_cpu_s() - busy
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        own_cpu = usage.ru_utime + usage.ru_stime
        return Timed(
            took, proc.returncode, out.read().decode(), err.read().decode(), usage.ru_maxrss / 1024, own_cpu, host_cpu
        )


def lab_spec(spec: str, state: Any, workdir: Path, nodes: int) -> Path:
    workers = f"node[2-{nodes}]" if nodes > 2 else "node2"
    return write_lab_spec(SPECS[spec], state, workdir / f"{spec}-{nodes}.yaml", {"workers": workers})


def package_sets(plan: dict[str, Any]) -> dict[str, list[str]]:
    """Each node's packages, read off the plan's install steps ("install a, b, c")."""
    sets: dict[str, list[str]] = {}
    for node, host in plan["hosts"].items():
        names: list[str] = []
        for op in host["operations"]:
            for step in op["steps"]:
                if step["kind"] == "install":
                    for pkg in step["summary"].removeprefix("install ").split(", "):
                        if pkg not in names:
                            names.append(pkg)
        sets[node] = names
    return sets


def ssh_all(state: Any, commands: dict[str, str]) -> tuple[float, list[str]]:
    """Run one command per node, all at once; wall time and the nodes whose command failed."""

    def one(item: tuple[str, str]) -> tuple[str, int]:
        node, cmd = item
        cp = subprocess.run(core.ssh_command(state, node, [cmd]), capture_output=True, stdin=subprocess.DEVNULL)
        return node, cp.returncode

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        results = list(pool.map(one, commands.items()))
    return time.monotonic() - start, [node for node, rc in results if rc != 0]


def mirror_errors(lab: str = NAME) -> int:
    """Lines in the error log of lab ``lab``'s mirror (apt-cacher-ng's failures so far)."""
    try:
        with open(os.path.join(LabPaths(lab).mirror_dir, "log", "apt-cacher.err")) as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def node_memory_mb() -> float:
    """Mean RSS of one lab node's processes (its systemd and everything below)."""
    pids = core.node_pids(NAME)
    return sum(rss_kib(children(pid)) for pid in pids.values()) / 1024 / max(len(pids), 1)


def measure(spec: str, nodes: int, workdir: Path) -> Row:
    row = Row(spec, nodes)
    env = {"GPUFORGE_STATE_DIR": str(workdir / f"state-{spec}-{nodes}")}
    core.down(NAME, log=QUIET)
    state = core.up(NAME, nodes, SUBNET, log=QUIET)
    path = lab_spec(spec, state, workdir, nodes)
    planned = gpuforge("plan", str(path), "--json", env=env)
    if planned.rc != 0:
        raise SystemExit(f"gpuforge plan failed ({planned.rc}):\n{planned.out}\n{planned.err}")
    packages = package_sets(json.loads(planned.out))
    everything = sorted({p for names in packages.values() for p in names})
    # Warm the mirror's cache with every package first: the floor and the apply then fetch alike.
    warm = f"{APT_UPDATE} && apt-get -q -y --no-install-recommends --download-only install {' '.join(everything)}"
    if ssh_all(state, {"node1": warm + " && apt-get clean"})[1]:
        raise SystemExit("warming the mirror failed")
    install = f"{APT_ENV} apt-get -q -y --no-install-recommends install"
    errors = mirror_errors()
    row.floor_s, failed = ssh_all(
        state, {n: f"{APT_UPDATE} && {install} {' '.join(names)}" for n, names in packages.items()}
    )
    row.floor_failed = len(failed)
    row.floor_mirror_errors = mirror_errors() - errors

    core.down(NAME, log=QUIET)
    start = time.monotonic()
    state = core.up(NAME, nodes, SUBNET, log=QUIET)
    row.up_s = time.monotonic() - start
    time.sleep(5)
    row.idle_node_mb = node_memory_mb()

    errors = mirror_errors()
    first = gpuforge("apply", "--yes", str(path), "--json", env=env)
    row.apply_mirror_errors = mirror_errors() - errors
    row.apply_s, row.apply_rss_mb, row.apply_cpu_s = first.seconds, first.max_rss_mb, first.cpu_s
    result = json.loads(first.out) if first.out.strip() else {}
    row.apply_failed = sorted(h for h, r in result.get("hosts", {}).items() if not r.get("ok"))
    if first.rc != 0 and not row.apply_failed:
        row.apply_failed = [f"exit {first.rc}: {first.err.strip().splitlines()[-1:]}"]
    row.stack_node_mb = node_memory_mb()
    noop = gpuforge("apply", "--yes", str(path), "--json", env=env)
    row.noop_s, row.noop_cpu_s, row.noop_host_cpu_s = noop.seconds, noop.cpu_s, noop.host_cpu_s
    row.noop_changes = int(json.loads(noop.out).get("changes", -1)) if noop.out.strip() else -1
    checked = gpuforge("validate", str(path), env=env)
    row.validate_s, row.validate_ok = checked.seconds, checked.rc == 0
    return row


def table(rows: list[Row]) -> str:
    head = (
        f"{'spec':8} {'N':>3} {'up s':>6} {'idle MB':>7} {'floor s':>7} {'apply s':>7} {'ratio':>5} "
        f"{'failed':>6} {'m.err':>5} {'ctl MB':>6} {'ctl cpu':>7} {'no-op s':>7} {'ctl cpu':>7} {'all cpu':>7} "
        f"{'chg':>3} {'valid s':>7} {'ok':>3} {'node MB':>7}"
    )
    lines = [LEGEND, head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.spec:8} {r.nodes:3d} {r.up_s:6.1f} {r.idle_node_mb:7.1f} {r.floor_s:7.1f} {r.apply_s:7.1f} "
            f"{r.ratio:5.2f} {len(r.apply_failed) + r.floor_failed:6d} "
            f"{r.floor_mirror_errors + r.apply_mirror_errors:5d} {r.apply_rss_mb:6.0f} {r.apply_cpu_s:7.1f} "
            f"{r.noop_s:7.1f} {r.noop_cpu_s:7.1f} {r.noop_host_cpu_s:7.1f} {r.noop_changes:3d} "
            f"{r.validate_s:7.1f} {'yes' if r.validate_ok else 'NO':>3} {r.stack_node_mb:7.1f}"
        )
    return "\n".join(lines)


def verdicts(rows: list[Row]) -> list[str]:
    """The targets, judged at the largest N measured for each spec."""
    out = []
    for spec in dict.fromkeys(r.spec for r in rows):
        r = max((r for r in rows if r.spec == spec), key=lambda r: r.nodes)
        checks = [
            ("first apply converged in one run, 0 failed", not r.apply_failed and r.floor_failed == 0),
            (f"first apply / floor {r.ratio:.2f} <= {TARGETS['apply_over_floor']}", r.ratio <= 1.2),
            (f"no-op re-apply {r.noop_s:.1f} s <= 6 s, 0 changes", r.noop_s <= 6.0 and r.noop_changes == 0),
            (f"validate {r.validate_s:.1f} s <= 8 s, passed", r.validate_s <= 8.0 and r.validate_ok),
            (f"lab up {r.up_s:.1f} s <= 30 s", r.up_s <= 30.0),
        ]
        out += [f"{spec}, {r.nodes} nodes: {what}: {'OK' if ok else 'MISSED'}" for what, ok in checks]
    return out


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = [("up_s", "lab up"), ("floor_s", "floor (apt-get)"), ("apply_s", "first apply")]
    figures += [("noop_s", "no-op re-apply"), ("validate_s", "validate")]
    specs = list(dict.fromkeys(r.spec for r in rows))
    fig, axes = plt.subplots(1, len(specs), figsize=(6 * len(specs), 4.5), squeeze=False)
    for ax, spec in zip(axes[0], specs, strict=True):
        mine = sorted((r for r in rows if r.spec == spec), key=lambda r: r.nodes)
        for attr, label in figures:
            ax.plot([r.nodes for r in mine], [getattr(r, attr) for r in mine], marker="o", label=label)
        ax.set(title=f"{spec} spec", xlabel="lab nodes (N)", ylabel="seconds")
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.suptitle("gpuforge on the lab: time against node count (2 cores, one site mirror)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so the lab is torn down in ``finally``


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3,12,24,48", help="node counts, comma-separated")
    ap.add_argument("--specs", default="minimal,lab", help=f"which of {', '.join(SPECS)}")
    ap.add_argument("--no-plot", action="store_true", help="print the table only (no matplotlib needed)")
    args = ap.parse_args()
    sizes = sorted(int(n) for n in args.sizes.split(","))
    specs = args.specs.split(",")
    if any(n < 2 for n in sizes) or any(s not in SPECS for s in specs):
        ap.error(f"sizes must be >= 2 and specs among {', '.join(SPECS)}")
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("the plot needs matplotlib: pip install '.[bench]' (or --no-plot)")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gfscale-") as tmp:
        try:
            for spec in specs:
                for nodes in sizes:
                    rows.append(measure(spec, nodes, Path(tmp)))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)  # the row alone
        finally:
            core.down(NAME, log=QUIET)
    print(table(rows))
    for line in verdicts(rows):
        print(line)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(
        json.dumps([{**asdict(r), "ratio": round(r.ratio, 3)} for r in rows], indent=1) + "\n"
    )
    if not args.no_plot:
        plot(rows, RESULTS / "scale.png")
        print(f"wrote {(RESULTS / 'scale.json').relative_to(REPO)} and {(RESULTS / 'scale.png').relative_to(REPO)}")
    return 0 if all(line.endswith("OK") for line in verdicts(rows)) else 1


if __name__ == "__main__":
    sys.exit(main())

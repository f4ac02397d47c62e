#!/usr/bin/python3
"""``gpuforge-slurm-metrics``: Slurm state as a node-exporter textfile (stdlib only).

Debian's Slurm has no metrics endpoint and there is no exporter package, so a systemd
timer runs this on Slurm's controller and accounting nodes. It reads

* ``sinfo -h -N -o '%N|%T|%E'``: every node's state and reason,
* ``squeue -h -a -t PENDING,RUNNING -o '%P|%a|%T'``: jobs per partition, account and state,
* ``scontrol -o show node``: GPU GRES configured (CfgTRES) and allocated (AllocTRES),
* ``systemctl is-active <daemon>``: whether slurmctld / slurmdbd run,

and writes ``gpuforge_slurm_*`` series into one ``.prom`` file, atomically (temp file in the
same directory, then rename), so node-exporter never reads half of it. A command that fails
or times out leaves its series out and sets ``gpuforge_slurm_collector_success{source}`` to 0.
The parsers are pure functions (text in, data out); the deploy installs this file as is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

SINFO = ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]
SQUEUE = ["squeue", "-h", "-a", "-t", "PENDING,RUNNING", "-o", "%P|%a|%T"]
SCONTROL_NODES = ["scontrol", "-o", "show", "node"]
COMMAND_TIMEOUT_S = 15
T = TypeVar("T")

#: The state classes exported (one series per node and class, the node's class set to 1).
STATES = ("idle", "alloc", "mix", "drain", "down", "other")
_STATE_CLASS = {
    "idle": "idle",
    "allocated": "alloc",
    "completing": "alloc",
    "mixed": "mix",
    "drained": "drain",
    "draining": "drain",
    "failing": "drain",
    "down": "down",
    "fail": "down",
}
#: Flags sinfo appends to a long state name (``idle*``: not responding, ``mixed+``, ``idle~``, ...).
_STATE_FLAGS = "*~#!%$@^-+"


def state_class(state: str) -> str:
    """``sinfo %T`` long state -> one of :data:`STATES` (flags stripped, unknown -> ``other``)."""
    base = state.strip().lower().rstrip(_STATE_FLAGS)
    return _STATE_CLASS.get(base, "other")


def parse_sinfo(text: str) -> dict[str, tuple[str, str]]:
    """``sinfo -N -o '%N|%T|%E'`` -> node -> (state class, reason; '' for none).

    A node in several partitions is listed once per partition: the first line wins."""
    nodes: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 2)
        if len(parts) != 3:
            raise ValueError(f"sinfo line without 3 fields: {line!r}")
        name, state, reason = (p.strip() for p in parts)
        nodes.setdefault(name, (state_class(state), "" if reason == "none" else reason))
    return nodes


def parse_squeue(text: str) -> dict[tuple[str, str, str], int]:
    """``squeue -o '%P|%a|%T'`` -> (partition, account, pending|running) -> job count."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 3:
            raise ValueError(f"squeue line without 3 fields: {line!r}")
        partition, account, state = (p.strip() for p in parts)
        if state in ("PENDING", "RUNNING"):
            counts[(partition, account, state.lower())] += 1
    return dict(sorted(counts.items()))


def _gpus(tres: str) -> int:
    """``gres/gpu`` count of a TRES list (``cpu=4,mem=1G,gres/gpu=2,gres/gpu:h100=2`` -> 2)."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu":
            return int(value) if value.isdigit() else 0
    return 0


def parse_scontrol_nodes(text: str) -> dict[str, tuple[int, int]]:
    """``scontrol -o show node`` -> node -> (GPUs allocated, GPUs configured)."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        name = fields.get("NodeName")
        if name:
            out[name] = (_gpus(fields.get("AllocTRES", "")), _gpus(fields.get("CfgTRES", "")))
    return out


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**kv: str) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in kv.items())


def metrics_text(
    nodes: dict[str, tuple[str, str]] | None,
    jobs: dict[tuple[str, str, str], int] | None,
    gpus: dict[str, tuple[int, int]] | None,
    daemons: dict[str, bool],
    now: float,
    queue: bool = True,
) -> str:
    """The textfile; ``None`` for a source that failed (its series are left out).

    ``queue``: this node collects nodes/jobs/GRES (the controller), so their success is reported."""
    out: list[str] = []

    def family(name: str, help_: str) -> None:
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} gauge"])

    if nodes is not None:
        family(
            "gpuforge_slurm_node_state",
            "1 for the node's state class (idle/alloc/mix/drain/down/other), with its reason.",
        )
        for name, (cls, reason) in sorted(nodes.items()):
            for s in STATES:
                out.append(
                    f"gpuforge_slurm_node_state{{{_labels(slurm_node=name, state=s, reason=reason)}}} {int(s == cls)}"
                )
    if jobs is not None:
        family("gpuforge_slurm_jobs", "Jobs by partition, account and state (pending/running).")
        for (partition, account, state), n in jobs.items():
            out.append(f"gpuforge_slurm_jobs{{{_labels(partition=partition, account=account, state=state)}}} {n}")
    if gpus is not None:
        family("gpuforge_slurm_gpus_allocated", "GPU GRES allocated to jobs on the node.")
        for name, (alloc, _) in sorted(gpus.items()):
            out.append(f"gpuforge_slurm_gpus_allocated{{{_labels(slurm_node=name)}}} {alloc}")
        family("gpuforge_slurm_gpus_total", "GPU GRES configured on the node.")
        for name, (_, total) in sorted(gpus.items()):
            out.append(f"gpuforge_slurm_gpus_total{{{_labels(slurm_node=name)}}} {total}")
    if daemons:
        family("gpuforge_slurm_daemon_up", "1 when the Slurm daemon's systemd unit is active on this node.")
        for d, up in sorted(daemons.items()):
            out.append(f"gpuforge_slurm_daemon_up{{{_labels(daemon=d)}}} {int(up)}")
    if queue:
        family("gpuforge_slurm_collector_success", "1 when the source command succeeded in the last run.")
        for source, data in (("sinfo", nodes), ("squeue", jobs), ("scontrol", gpus)):
            out.append(f"gpuforge_slurm_collector_success{{{_labels(source=source)}}} {int(data is not None)}")
    family("gpuforge_slurm_collector_last_run_timestamp_seconds", "When the collector last ran.")
    out.append(f"gpuforge_slurm_collector_last_run_timestamp_seconds {now:.3f}")
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write ``path`` via a temp file in its directory and a rename (readers never see half)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".slurm-metrics.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _run(argv: Sequence[str]) -> str | None:
    try:
        cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"gpuforge-slurm-metrics: {argv[0]}: {e}", file=sys.stderr)
        return None
    if cp.returncode != 0:
        print(f"gpuforge-slurm-metrics: {' '.join(argv)}: rc={cp.returncode}: {cp.stderr.strip()}", file=sys.stderr)
        return None
    return cp.stdout


def _parsed(argv: Sequence[str], parse: Callable[[str], T]) -> T | None:
    text = _run(argv)
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError as e:
        print(f"gpuforge-slurm-metrics: {argv[0]}: {e}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuforge-slurm-metrics", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the .prom file to write (in node-exporter's textfile directory)")
    p.add_argument("--queue", action="store_true", help="collect nodes, jobs and GRES (the controller)")
    p.add_argument("--daemons", default="", help="comma-separated systemd units to report, e.g. slurmctld,slurmdbd")
    args = p.parse_args(argv)
    nodes = jobs = gpus = None
    if args.queue:
        nodes = _parsed(SINFO, parse_sinfo)
        jobs = _parsed(SQUEUE, parse_squeue)
        gpus = _parsed(SCONTROL_NODES, parse_scontrol_nodes)
    daemons = {d: _run(["systemctl", "is-active", "--quiet", d]) is not None for d in args.daemons.split(",") if d}
    write_atomic(args.out, metrics_text(nodes, jobs, gpus, daemons, time.time(), args.queue))
    return 0 if (not args.queue or None not in (nodes, jobs, gpus)) else 1


if __name__ == "__main__":
    sys.exit(main())

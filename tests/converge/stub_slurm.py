"""A stand-in Slurm controller for rollout tests: real ``sh`` runs gpuforge's drain, wait and
resume commands against stub ``scontrol``, ``squeue`` and ``sinfo`` on PATH.

The stubs keep the cluster in one JSON file: each node's drain flag and reason, and jobs that end
at a wall-clock time, or after ``squeue`` has listed them a given number of times (so the answers
change while a command waits, however slowly a busy machine runs it). Every call is logged.
``StubSlurm.remote_run`` replaces :func:`gpuforge.orchestrate.remote.run`: commands for the
controller run for real in that shell; commands for other nodes (reboots) are recorded and
answered with success.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

EXPAND_SOURCE = r"""
def expand(expr):
    out = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", expr):
        m = re.fullmatch(r"(.*)\[(.*)\]", part)
        if not m:
            out.append(part)
            continue
        for r in m.group(2).split(","):
            lo, _, hi = r.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{m.group(1)}{i:0{len(lo)}d}")
    return out
"""
"""A hostlist expander in the stubs' own Python (``node[1-3,5]`` -> names), shared by the Slurm stubs."""

STUB = (
    r"""
import json, os, re, sys, time, fcntl

STATE = os.environ["STUB_SLURM"]


"""
    + EXPAND_SOURCE
    + r"""

def alive(job, now):
    return job["polls"] > 0 if job.get("polls") is not None else job["end"] > now


def running(state, node):
    now = time.time()
    return [j for j in state["jobs"] if j["node"] == node and alive(j, now)]


tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(STATE + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = json.load(open(STATE))
    with open(STATE + ".log", "a") as log:
        log.write(f"{time.time():.3f} {tool} {' '.join(args)}\n")
    if tool in state.get("fail", []):
        print(f"{tool}: error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
        sys.exit(1)
    opts = dict(a.split("=", 1) for a in args if "=" in a)
    if tool == "scontrol" and args[:1] == ["update"]:
        for n in expand(opts["NodeName"]):
            node = state["nodes"][n]
            if opts["State"] == "DRAIN":
                node.update(drain=True, reason=opts.get("Reason", ""))
            elif opts["State"] == "RESUME":
                node.update(drain=False, reason="")
            node["history"].append(opts["State"])
    elif tool == "squeue":
        names = expand(args[args.index("-w") + 1])
        for n in names:
            for j in running(state, n):
                print(f"{j['id']} {n}")
                if j.get("polls") is not None:
                    j["polls"] -= 1  # listed once more: it ends after its last listing
    elif tool == "sinfo":
        names = expand(args[args.index("-n") + 1])
        fmt = args[args.index("-o") + 1]
        for n in names:
            node = state["nodes"].get(n)
            if node is None:
                continue
            busy = bool(running(state, n))
            st = ("draining" if busy else "drained") if node["drain"] else ("allocated" if busy else "idle")
            print(fmt.replace("%N", n).replace("%T", st).replace("%E", node["reason"] or "none"))
    json.dump(state, open(STATE, "w"))
"""
)


class StubSlurm:
    """The stand-in controller's state and tools under ``root``."""

    def __init__(self, root: Path, controller: str, nodes: list[str]) -> None:
        self.root, self.controller = root, controller
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.state = root / "slurm.json"
        state = {"nodes": {n: {"drain": False, "reason": "", "history": []} for n in nodes}, "jobs": [], "fail": []}
        self.state.write_text(json.dumps(state))
        for tool in ("scontrol", "squeue", "sinfo"):
            path = self.bin / tool
            path.write_text(f"#!{sys.executable}\n{STUB}")
            path.chmod(0o755)
        self.node_commands: list[tuple[str, str]] = []

    def read(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())  # type: ignore[no-any-return]

    def write(self, state: dict[str, Any]) -> None:
        self.state.write_text(json.dumps(state))

    def drain_by_hand(self, node: str, reason: str) -> None:
        """An operator's ``scontrol update NodeName=<node> State=DRAIN Reason=<reason>``."""
        state = self.read()
        state["nodes"][node].update(drain=True, reason=reason)
        self.write(state)

    def add_job(self, job_id: int, node: str, seconds: float | None = None, polls: int | None = None) -> None:
        """A job on ``node`` that ends ``seconds`` from now, or after ``squeue`` listed it ``polls`` times."""
        state = self.read()
        end = time.time() + seconds if seconds is not None else None
        state["jobs"].append({"id": job_id, "node": node, "end": end, "polls": polls})
        self.write(state)

    def jobs_running(self, node: str) -> list[int]:
        now = time.time()

        def alive(job: dict[str, Any]) -> bool:
            return bool(job["polls"] > 0 if job["polls"] is not None else job["end"] > now)

        return [j["id"] for j in self.read()["jobs"] if j["node"] == node and alive(j)]

    def fail(self, tool: str) -> None:
        state = self.read()
        state["fail"].append(tool)
        self.write(state)

    def node(self, name: str) -> dict[str, Any]:
        return self.read()["nodes"][name]  # type: ignore[no-any-return]

    def log(self) -> list[str]:
        path = Path(f"{self.state}.log")
        return [line.split(" ", 1)[1] for line in path.read_text().splitlines()] if path.exists() else []

    def shell(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``command`` in a real ``sh`` with the stubs first on PATH."""
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "STUB_SLURM": str(self.state)}
        try:
            return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", f"timed out after {timeout:.0f} s")

    def remote_run(
        self, cluster: Any, node: str, command: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        if node == self.controller:
            return self.shell(command, timeout)
        self.node_commands.append((node, command))
        return subprocess.CompletedProcess(command, 0, "", "")

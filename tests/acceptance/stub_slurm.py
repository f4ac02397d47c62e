"""A stand-in Slurm for acceptance campaigns: real ``sh`` runs gpuforge's commands against stub
``sbatch``, ``srun``, ``scontrol``, ``sinfo`` and ``scancel`` on PATH, and any tool the steps call
(``stress-ng``, ``fio``, ...) is whatever the test puts first on PATH (real or a stub).

State is one JSON file: nodes (state, reason, partitions), partitions (members), jobs, reservations.
``sbatch`` reads the script (a file, or stdin), runs it at once (its ``#SBATCH --output`` under the stub's
own folder instead of /var/lib/gpuforge) with ``SLURM_JOB_ID`` and ``SLURM_JOB_NODELIST`` set; ``srun`` runs
its command once per node of the job (in ``SLURM_HOSTFILE``'s order with ``--distribution=arbitrary``),
in parallel, with ``SLURMD_NODENAME`` set, each line prefixed ``<task>: `` with ``--label``, and refuses
``--container-image`` unless ``STUB_PYXIS`` is set. Every call is logged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuforge.validator.runner import Completed
from tests.converge.stub_slurm import EXPAND_SOURCE

STUB = (
    r"""
import fcntl, json, os, re, subprocess, sys, threading, time

ROOT = os.environ["STUB_ROOT"]
STATE = os.path.join(ROOT, "slurm.json")


"""
    + EXPAND_SOURCE
    + r"""

def load():
    return json.load(open(STATE))


def save(state):
    json.dump(state, open(STATE, "w"))


def locked(fn):
    with open(STATE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load()
        out = fn(state)
        save(state)
    return out


tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
with open(os.path.join(ROOT, "calls.log"), "a") as log:
    log.write(f"{tool} {' '.join(args)}\n")
if os.path.exists(os.path.join(ROOT, f"fail-{tool}")):
    print(f"{tool}: error: Unable to contact slurm controller (connect failure)", file=sys.stderr)
    sys.exit(1)


def sinfo():
    names = expand(args[args.index("-n") + 1])
    fmt = args[args.index("-o") + 1]
    state = load()
    for n in names:
        node = state["nodes"].get(n)
        if node is None:
            continue
        for p in node["partitions"] or ["(none)"]:
            print(fmt.replace("%N", n).replace("%T", node["state"]).replace("%E", node["reason"] or "none")
                  .replace("%P", p))


def scontrol():
    opts = dict(a.split("=", 1) for a in args if "=" in a)
    words = [a for a in args if a != "-o"]
    if words[:2] == ["show", "job"]:
        job = load()["jobs"].get(words[2])
        if job is None:
            print("slurm_load_jobs error: Invalid job id specified")
            return 1
        print(f"JobId={words[2]} JobName={job['name']} JobState={job['state']} Reason=None "
              f"ExitCode={job['rc']}:0 BatchHost={job['nodes'][0]} NodeList={','.join(job['nodes'])}")
        return 0
    if words[:2] == ["show", "partition"]:
        members = load()["partitions"].get(words[2])
        if members is None:
            print(f"Partition {words[2]} not found")
            return 1
        print(f"PartitionName={words[2]} AllowGroups=ALL Default=NO State=UP Nodes={','.join(members) or '(null)'}")
        return 0
    if words[:1] == ["update"] and "NodeName" in opts:
        def upd(state):
            for n in expand(opts["NodeName"]):
                node = state["nodes"][n]
                if opts["State"] == "DRAIN":
                    node["state"] = "drained" if node["state"] in ("idle", "drained") else "draining"
                    node["reason"] = opts.get("Reason", "")
                elif opts["State"] == "RESUME":
                    node["state"], node["reason"] = "idle", ""
        locked(upd)
        return 0
    if words[:1] == ["update"] and "PartitionName" in opts:
        def upd(state):
            p = opts["PartitionName"]
            new = expand(opts["Nodes"]) if opts["Nodes"] else []
            for n, node in state["nodes"].items():
                if n in new and p not in node["partitions"]:
                    node["partitions"].append(p)
                if n not in new and p in node["partitions"]:
                    node["partitions"].remove(p)
            state["partitions"][p] = new
        locked(upd)
        return 0
    if words[:2] == ["create", "reservation"]:
        locked(lambda s: s["reservations"].update({opts["ReservationName"]: expand(opts["Nodes"])}))
        print(f"Reservation created: {opts['ReservationName']}")
        return 0
    if words[:1] == ["delete"]:
        locked(lambda s: s["reservations"].pop(opts["ReservationName"], None))
        return 0
    print(f"stub scontrol: unexpected {args}", file=sys.stderr)
    return 1


def sbatch():
    files = [a for a in args if not a.startswith("-")]
    script = open(files[0]).read() if files else sys.stdin.read()
    opts = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)", script, re.M))
    nodes = expand(opts["nodelist"])
    def add(state):
        jid = str(state["next_job"])
        state["next_job"] += 1
        state["jobs"][jid] = {"name": opts.get("job-name", "?"), "state": "RUNNING", "rc": 0, "nodes": nodes}
        return jid
    jid = locked(add)
    print(jid)
    sys.stdout.flush()
    out = opts["output"].replace("/var/lib/gpuforge", ROOT).replace("%j", jid)
    env = {**os.environ, "SLURM_JOB_ID": jid, "SLURM_JOB_NODELIST": ",".join(nodes), "SLURM_NNODES": str(len(nodes))}
    with open(out, "w") as f:
        rc = subprocess.run(["sh", "-s"], input=script.encode(), stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    def end(state):
        state["jobs"][jid].update(state="COMPLETED" if rc == 0 else "FAILED", rc=rc)
    locked(end)
    return 0


def srun():
    if any(a.startswith("--container-image") for a in args) and not os.environ.get("STUB_PYXIS"):
        print(f"srun: unrecognized option '{next(a for a in args if a.startswith('--container-image'))}'")
        return 1
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 1
    command = args[i:]
    nodes = os.environ["SLURM_JOB_NODELIST"].split(",")
    if "--distribution=arbitrary" in args:  # tasks laid out in the order of SLURM_HOSTFILE
        nodes = open(os.environ["SLURM_HOSTFILE"]).read().split()
    label = "--label" in args or "-l" in args
    outputs = {}
    def one(node):
        cp = subprocess.run(command, capture_output=True, env={**os.environ, "SLURMD_NODENAME": node})
        outputs[node] = (cp.returncode, cp.stdout.decode() + cp.stderr.decode())
    threads = [threading.Thread(target=one, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for task, n in enumerate(nodes):
        text = outputs[n][1]
        if label:  # srun --label: each line prefixed with its task number (padded to the widest)
            width = len(str(len(nodes) - 1))
            text = "".join(f"{task:>{width}}: {line}" for line in text.splitlines(keepends=True))
        sys.stdout.write(text)
    return max(rc for rc, _ in outputs.values())


def scancel():
    locked(lambda s: [s["jobs"][j].update(state="CANCELLED") for j in args if j in s["jobs"]])
    return 0


sys.exit({"sinfo": sinfo, "scontrol": scontrol, "sbatch": sbatch, "srun": srun, "scancel": scancel}[tool]() or 0)
"""
)


class StubSlurm:
    """The stand-in cluster's state and tools under ``root``; :meth:`run` is a Transport's ``run``."""

    def __init__(self, root: Path, partitions: dict[str, list[str]], tools: dict[str, str] | None = None) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        nodes = sorted({n for members in partitions.values() for n in members})
        state = {
            "nodes": {n: {"state": "idle", "reason": "", "partitions": [p for p, m in partitions.items() if n in m]}
                      for n in nodes},
            "partitions": partitions, "jobs": {}, "reservations": {}, "next_job": 100,
        }  # fmt: skip
        (root / "slurm.json").write_text(json.dumps(state))
        for tool in ("sinfo", "scontrol", "sbatch", "srun", "scancel"):
            self.tool(tool, f"#!{sys.executable}\n{STUB}")
        for name, text in (tools or {}).items():
            self.tool(name, text)
        self.env: dict[str, str] = {}

    def tool(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)

    def read(self) -> dict[str, Any]:
        return json.loads((self.root / "slurm.json").read_text())  # type: ignore[no-any-return]

    def set_node(self, name: str, **values: Any) -> None:
        state = self.read()
        state["nodes"][name].update(values)
        (self.root / "slurm.json").write_text(json.dumps(state))

    def calls(self) -> list[str]:
        path = self.root / "calls.log"
        return path.read_text().splitlines() if path.exists() else []

    def run(self, node: Any, command: str, stdin: bytes | None = None, timeout: float = 60) -> Completed:
        """Any node's command in a real ``sh`` with the stubs first on PATH (the job output's folder
        mapped to the stub's)."""
        env = {**os.environ, **self.env, "PATH": f"{self.bin}:{os.environ['PATH']}", "STUB_ROOT": str(self.root)}
        command = command.replace("/var/lib/gpuforge/gpuforge-accept-", f"{self.root}/gpuforge-accept-")
        try:
            cp = subprocess.run(["sh", "-c", command], input=stdin or b"", capture_output=True, env=env,
                                timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Completed(124, "", "timed out", timeout)
        return Completed(cp.returncode, cp.stdout.decode(), cp.stderr.decode(), 0.0)

"""A stand-in Kubernetes API for acceptance campaigns, built on tests/converge/stub_kube.py's StubKube:
real ``sh`` runs gpuforge's kubectl command lines against a stub ``kubectl`` on PATH that keeps nodes
(labels, taints, cordon, annotations, Ready) and Jobs in one JSON file and logs every call.

Jobs change state as a real cluster's would, one step per ``kubectl get jobs``: first Pending, then
Running (at that moment the pod's container command runs for real, here, with the Job's environment
and ``SLURMD_NODENAME``: the node runner and whatever stub tools are first on PATH), then Complete
or Failed by its exit status. ``STUB_NEVER_START=<node,...>``: that node's pod stays Pending
(ErrImagePull); ``STUB_POD_CRASH=<node,...>``: its container exits 127 with no report;
``STUB_CORDON_DURING=<node>``: someone cordons that node (no gpuforge mark) when its Job ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuforge.validator.runner import Completed
from tests.converge.stub_kube import StubKube

KUBECTL = r"""
import fcntl, json, os, re, subprocess, sys

STATE = os.environ["STUB_KUBE"]
args = sys.argv[1:]
if args[:1] == ["--kubeconfig"]:
    args = args[2:]
env_list = lambda name: [n for n in os.environ.get(name, "").split(",") if n]


def opt(name):
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def selected(state):
    sel = opt("-l")
    key, value = sel.split("=", 1) if sel else (None, None)
    names = [a for a in args[2:] if not a.startswith("-") and a not in (opt("-n"), sel)]
    return [n for n, j in state["jobs"].items() if (key and j["labels"].get(key) == value) or n in names]


def run_pod(job):
    spec = job["manifest"]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    env = {**os.environ, **{e["name"]: e["value"] for e in c["env"]}}
    cmd = c["command"]
    if spec["nodeName"] in env_list("STUB_POD_CRASH"):
        cmd = ["sh", "-c", "echo 'exec: python3: not found' >&2; exit 127"]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    return cp.stdout + cp.stderr, cp.returncode


def advance(state, job):
    node = job["node"]
    job["seen"] = job.get("seen", 0) + 1
    if job["seen"] == 1:
        return  # the first answer: created, its pod Pending
    if job["phase"] == "Pending" and node not in env_list("STUB_NEVER_START"):
        job["phase"] = "Running"
        job["log"], job["rc"] = run_pod(job)
    elif job["phase"] == "Running":
        job["phase"] = "Succeeded" if job["rc"] == 0 else "Failed"
        job["conditions"] = {"Complete" if job["rc"] == 0 else "Failed": "True"}
        if node in env_list("STUB_CORDON_DURING"):
            state["nodes"][node]["unschedulable"] = True


def apply(state):
    assert args[1] == "--server-side" and opt("--field-manager"), args
    doc = json.load(open(opt("-f")))
    for item in doc["items"]:
        spec = item["spec"]
        pod = spec["template"]["spec"]
        assert item["kind"] == "Job" and pod["restartPolicy"] == "Never" and spec["backoffLimit"] == 0, item
        assert "ttlSecondsAfterFinished" in spec and pod["nodeName"], item
        name = item["metadata"]["name"]
        state["jobs"][name] = {"manifest": item, "labels": item["metadata"]["labels"], "node": pod["nodeName"],
                               "phase": "Pending", "conditions": {}, "log": "", "rc": None}
        state["applied"].append(name)
        print(f"job.batch/{name}")


def get(state):
    kind, path = args[1], opt("-o").split("=", 1)[1]
    if kind == "jobs":
        assert "{.status.conditions[*]}" in path or "range .status.conditions[*]" in path, path
        for n in selected(state):
            j = state["jobs"][n]
            advance(state, j)
            conds = "".join(f"{k}={v};" for k, v in j["conditions"].items())
            active = "1" if j["phase"] in ("Pending", "Running") else ""
            ok, bad = ("1", "") if j["phase"] == "Succeeded" else ("", "1" if j["phase"] == "Failed" else "")
            print(f"GFJOB {n}|{j['node']}|{active}|{ok}|{bad}|{conds}")
    elif kind == "pods":
        for n in selected(state):
            j = state["jobs"][n]
            reason = "ErrImagePull" if j["phase"] == "Pending" and j["node"] in env_list("STUB_NEVER_START") else ""
            print(f"GFPOD {j['node']}|{j['phase']}|{reason}")
    elif kind == "nodes":
        keys = [k.replace("\\.", ".") for k in re.findall(r"\.metadata\.labels\.((?:\\\.|[^}])+)\}", path)]
        for name, n in state["nodes"].items():
            taints = "".join(f"{t['key']}={t.get('value', '')}:{t['effect']}," for t in n["taints"])
            labels = "".join("|" + n["labels"].get(k, "") for k in keys)
            print(f"GFNODE {name}|{'true' if n['unschedulable'] else ''}|"
                  f"{n['annotations'].get('gpuforge.dev/cordoned-by', '')}|{n['ready']}|{taints}{labels}")
    elif kind == "node":
        n = state["nodes"][args[2]]
        print(f"{'true' if n['unschedulable'] else ''}|{n['annotations'].get('gpuforge.dev/cordoned-by', '')}",
              end="")
    else:
        sys.exit(f"stub kubectl: get {kind}?")


def logs(state):
    name = [a for a in args[1:] if a.startswith("job/")][0][4:]
    if name not in state["jobs"]:
        print(f'Error from server (NotFound): jobs.batch "{name}" not found', file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(state["jobs"][name]["log"])


def node_edit(state):
    verb, name = args[0], args[2] if args[1] == "node" else args[1]
    n = state["nodes"][name]
    words = [a for a in args[2 if verb == "cordon" else 3:] if not a.startswith("--")]
    if verb == "cordon":
        n["unschedulable"] = True
    elif verb in ("annotate", "label"):
        target = n["annotations" if verb == "annotate" else "labels"]
        for kv in words:
            k, v = kv.split("=", 1)
            if k in target and target[k] != v and "--overwrite" not in args:
                print(f"error: '{k}' already has a value ({target[k]})", file=sys.stderr)
                sys.exit(1)
            target[k] = v
    elif verb == "taint":
        for t in words:
            if t.endswith("-"):
                key, effect = t[:-1].split(":")
                before = len(n["taints"])
                n["taints"] = [x for x in n["taints"] if (x["key"], x["effect"]) != (key, effect)]
                if len(n["taints"]) == before:
                    print(f'error: taint "{t[:-1]}" not found', file=sys.stderr)
                    sys.exit(1)
            else:
                kv, effect = t.rsplit(":", 1)
                key, value = (kv.split("=", 1) + [""])[:2]
                n["taints"] = [x for x in n["taints"] if (x["key"], x["effect"]) != (key, effect)]
                n["taints"].append({"key": key, "value": value, "effect": effect})
    n["history"].append(" ".join(args))


with open(STATE + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = json.load(open(STATE))
    with open(STATE + ".log", "a") as log:
        log.write("kubectl " + " ".join(args) + "\n")
    verb = args[0]
    try:
        if verb == "apply":
            apply(state)
        elif verb == "get":
            get(state)
        elif verb == "logs":
            logs(state)
        elif verb == "delete":
            for n in selected(state):
                state["jobs"].pop(n)
                state["deleted"].append(n)
        elif verb in ("cordon", "annotate", "label", "taint"):
            node_edit(state)
        else:
            sys.exit(f"stub kubectl: {verb}?")
    finally:
        json.dump(state, open(STATE, "w"))
"""


class StubKubeJobs(StubKube):
    """``StubKube``'s state file and ``kubectl`` on PATH, with Jobs; :meth:`run` is a Transport's ``run``."""

    def __init__(self, root: Path, control_plane: str, nodes: list[str], tools: dict[str, str]) -> None:
        super().__init__(root, control_plane, nodes)
        doc = self.read()
        for n in doc["nodes"].values():
            n.update(labels={}, taints=[], ready="True")
        doc.update(jobs={}, applied=[], deleted=[])
        self.state.write_text(json.dumps(doc))
        (self.bin / "kubectl").write_text(f"#!{sys.executable}\n{KUBECTL}")
        for name, text in tools.items():
            path = self.bin / name
            path.write_text(text)
            path.chmod(0o755)
        self.env: dict[str, str] = {}
        self.targets: list[str] = []

    def set_node(self, name: str, **values: Any) -> None:
        self.update(lambda d: d["nodes"][name].update(values))

    def calls(self) -> list[str]:
        log = Path(f"{self.state}.log")
        return log.read_text().splitlines() if log.exists() else []

    def run(self, node: Any, command: str, stdin: bytes | None = None, timeout: float = 60) -> Completed:
        """The command in a real ``sh`` with the stub first on PATH (only the control plane is asked)."""
        self.targets.append(node.name)
        env = {**os.environ, **self.env, "PATH": f"{self.bin}:{os.environ['PATH']}", "STUB_KUBE": str(self.state)}
        try:
            cp = subprocess.run(["sh", "-c", command], input=stdin or b"", capture_output=True, env=env,
                                timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Completed(124, "", "timed out", timeout)
        return Completed(cp.returncode, cp.stdout.decode(), cp.stderr.decode(), 0.0)

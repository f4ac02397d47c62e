"""A stand-in Kubernetes API for rollout tests: real ``sh`` runs gpuforge's cordon, drain and
uncordon commands against a stub ``kubectl`` on PATH that keeps nodes (cordon flag, annotations)
and pods (evictable, or held by a PodDisruptionBudget) in one JSON file, and logs every call. It also
records what ``kubectl apply -f`` is given (files, or a folder's ``*.yaml``), and answers the GPU
Operator's driver upgrade reads (``get node -l ...``, ``get pods -l ...``) from scripted sequences.
``StubKube.remote_run`` replaces :func:`gpuforge.orchestrate.remote.run` like ``StubSlurm``'s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

KUBECTL = r"""
import json, os, sys, time, fcntl

STATE = os.environ["STUB_KUBE"]
args = sys.argv[1:]
if args[:1] == ["--kubeconfig"]:
    args = args[2:]
with open(STATE + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = json.load(open(STATE))
    with open(STATE + ".log", "a") as log:
        log.write("kubectl " + " ".join(args) + "\n")
    nodes, verb = state["nodes"], args[0]
    mark = "gpuforge.dev/cordoned-by"

    def polled(key):  # the next of a scripted sequence of reads (the last one repeats)
        seq = state.setdefault(key, [[]])
        return seq.pop(0) if len(seq) > 1 else seq[0]

    if verb == "apply":  # -f FILE or -f DIR/ (its *.yaml, sorted), as kubectl reads them
        files = []
        for i, a in enumerate(args):
            if a == "-f":
                p = args[i + 1]
                files += sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".yaml")) \
                    if os.path.isdir(p) else [p]
        for f in files:
            kind = "server-side" if "--server-side" in args else "client-side"
            state.setdefault("applied", []).append([os.path.basename(f), kind, open(f).read()])
            print(f"customresourcedefinition.apiextensions.k8s.io/{os.path.basename(f)} configured")
    elif verb == "get" and args[1] == "node" and "-l" in args:  # the GPU nodes' driver upgrade states
        for name, st in polled("upgrade_states"):
            print(f"{name}\t{st}")
    elif verb == "get" and args[1] == "pods" and "-l" in args:  # the driver daemon set's images
        for image in polled("driver_images"):
            print(image)
    elif verb == "get" and args[1] == "nodes":
        for name, n in nodes.items():
            print(f"{name}|{'true' if n['unschedulable'] else ''}|{n['annotations'].get(mark, '')}")
    elif verb == "get" and args[1] == "node" and len(args) == 3:  # does the node exist
        if args[2] not in nodes:
            print(f'Error from server (NotFound): nodes "{args[2]}" not found', file=sys.stderr)
            sys.exit(1)
        print(args[2])
    elif verb == "delete" and args[1] == "node":
        if args[2] not in nodes and "--ignore-not-found" not in args:
            sys.exit(1)
        nodes.pop(args[2], None)
    elif verb == "get" and args[1] == "node":
        n = nodes[args[2]]
        path = args[4] if len(args) > 4 else args[3].split("=", 1)[1]
        if "unschedulable" in path:
            print("true" if n["unschedulable"] else "", end="")
        elif "cordoned-by" in path:
            print(n["annotations"].get(mark, ""), end="")
    elif verb == "annotate":
        n = nodes[args[2]]
        kv = [a for a in args[3:] if not a.startswith("--")][0]
        if kv.endswith("-"):
            n["annotations"].pop(kv[:-1], None)
        else:
            k, v = kv.split("=", 1)
            n["annotations"][k] = v
    elif verb in ("cordon", "uncordon"):
        nodes[args[1]]["unschedulable"] = verb == "cordon"
        nodes[args[1]]["history"].append(verb)
    elif verb == "drain":
        name = args[1]
        nodes[name]["history"].append("drain")
        if not nodes[name]["unschedulable"]:
            nodes[name]["unschedulable"] = True
        blocked = [p for p in state["pods"] if p["node"] == name and p["pdb_blocked"]]
        if blocked:
            json.dump(state, open(STATE, "w"))
            print("error: Cannot evict pod as it would violate the pod's disruption budget.", file=sys.stderr)
            sys.exit(1)
        state["pods"] = [p for p in state["pods"] if p["node"] != name]
    json.dump(state, open(STATE, "w"))
"""


class StubKube:
    """A stand-in Kubernetes API for rollout tests: ``kubectl`` on PATH keeps nodes (cordon flag,
    annotations) and pods (evictable, or held by a PodDisruptionBudget) in one JSON file."""

    def __init__(self, root: Path, control_plane: str, nodes: list[str]) -> None:
        self.root, self.controller = root, control_plane
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.state = root / "kube.json"
        doc = {"nodes": {n: {"unschedulable": False, "annotations": {}, "history": []} for n in nodes}, "pods": []}
        self.state.write_text(json.dumps(doc))
        path = self.bin / "kubectl"
        path.write_text(f"#!{sys.executable}\n{KUBECTL}")
        path.chmod(0o755)
        self.node_commands: list[tuple[str, str]] = []

    def read(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())  # type: ignore[no-any-return]

    def update(self, change: Any) -> None:
        doc = self.read()
        change(doc)
        self.state.write_text(json.dumps(doc))

    def node(self, name: str) -> dict[str, Any]:
        return self.read()["nodes"][name]  # type: ignore[no-any-return]

    def pods_on(self, name: str) -> int:
        return sum(p["node"] == name for p in self.read()["pods"])

    def remote_run(
        self, cluster: Any, node: str, command: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        if node != self.controller:
            self.node_commands.append((node, command))
            return subprocess.CompletedProcess(command, 0, "", "")
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "STUB_KUBE": str(self.state)}
        try:
            return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", f"timed out after {timeout:.0f} s")

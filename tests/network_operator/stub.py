"""Stand-in ``kubectl`` and ``helm`` for the Network Operator's add-ons, run by a real ``sh``: kubectl
keeps namespaces (and their labels) and the applied files in one JSON file, answers the
NicClusterPolicy's ``status.state`` and ``status.reason`` from a scripted sequence of reads (the last
one repeats) and logs every call; helm pulls chart archives from a folder, logs ``upgrade`` and
reports revision 4 in ``history``. ``sleep`` is instant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

KUBECTL = r"""
import json, os, sys

STATE = os.environ["STUB_KUBE"]
args = sys.argv[1:]
state = json.load(open(STATE))
with open(os.environ["LOG"], "a") as log:
    log.write("kubectl " + " ".join(args) + "\n")
verb = args[0]
if verb == "get" and args[1] == "namespace":
    sys.exit(0 if args[2] in state["namespaces"] else 1)
elif verb == "create" and args[1] == "namespace":
    state["namespaces"][args[2]] = {}
elif verb == "label" and "namespace" in args:
    ns = args[args.index("namespace") + 1]
    k, v = args[-1].split("=", 1)
    state["namespaces"][ns][k] = v
elif verb == "apply":
    f = args[args.index("-f") + 1]
    state.setdefault("applied", []).append([f, "--server-side" in args, open(f).read()])
elif verb == "get" and args[1] == "nicclusterpolicies.mellanox.com":
    seq = state["policy"]
    now = seq[0]
    if "{.status.state}" in args[-1]:
        if len(seq) > 1:
            seq.pop(0)
        if now is None:
            print('Error from server (NotFound): nicclusterpolicies.mellanox.com "nic-cluster-policy" not found',
                  file=sys.stderr)
            json.dump(state, open(STATE, "w"))
            sys.exit(1)
        print(now[0], end="")
    elif now is not None:
        print(now[1], end="")
else:
    print("stub kubectl: unexpected " + " ".join(args), file=sys.stderr)
    sys.exit(2)
json.dump(state, open(STATE, "w"))
"""

HELM = """#!/bin/sh
echo "helm $*" >> "$LOG"
case "$1" in
pull) ref=$2; shift 2; while [ $# -gt 0 ]; do case "$1" in --version) v=$2;; --destination) d=$2;; esac; shift; done
      mkdir -p "$d" && cp "$CHARTS/$ref-$v.tgz" "$d/" ;;
history) echo '[{"revision":4,"status":"deployed"}]' ;;
esac
"""


class Node:
    """The first control plane: ``run(command)`` runs it through ``sh`` with the stand-ins on PATH and
    gpuforge's paths moved under ``root``."""

    def __init__(self, root: Path, charts: dict[str, bytes], files: dict[str, bytes]) -> None:
        self.root, self.bin, self.charts = root, root / "bin", root / "charts"
        self.bin.mkdir(parents=True)
        self.charts.mkdir()
        for name, blob in charts.items():
            (self.charts / name).write_bytes(blob)
        self.files = files
        self.state, self.log = root / "kube.json", root / "calls.log"
        self.state.write_text(json.dumps({"namespaces": {"kube-system": {}}, "policy": [None]}))
        for tool, text in (("kubectl", f"#!{sys.executable}\n{KUBECTL}"), ("helm", HELM), ("sleep", "#!/bin/sh\n")):
            (self.bin / tool).write_text(text)
            (self.bin / tool).chmod(0o755)

    def policy_reads(self, *reads: tuple[str, str] | None) -> None:
        """The NicClusterPolicy's (state, reason) at each read (None: not found)."""
        doc = json.loads(self.state.read_text())
        doc["policy"] = [list(r) if r else None for r in reads]
        self.state.write_text(json.dumps(doc))

    def read(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def moved(self, command: str) -> str:
        out = command.replace("/usr/local/bin/helm", str(self.bin / "helm"))
        out = out.replace("/var/lib/gpuforge", str(self.root / "var"))
        for path in self.files:
            out = out.replace(path, str(self.root / "etc" / Path(path).name))
        return out

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        (self.root / "etc").mkdir(exist_ok=True)
        for path, blob in self.files.items():
            (self.root / "etc" / Path(path).name).write_bytes(blob)
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "STUB_KUBE": str(self.state),
               "LOG": str(self.log), "CHARTS": str(self.charts)}  # fmt: skip
        return subprocess.run(["sh", "-c", self.moved(command)], env=env, capture_output=True, text=True, timeout=60)

"""A stand-in cluster for the Slurm upgrade flow: real ``sh`` runs gpuforge's commands with stub
``systemctl``, ``apt-get``, ``apt-cache``, ``dpkg-query``, ``mysqldump``, ``slurmdbd``, ``slurmctld``,
``slurmd``, ``sinfo``, ``scontrol``, ``ss``, ``runuser`` and ``chown`` first on PATH.

One JSON file holds every node's installed Slurm version and active units, the accounting
database's rows (jobs), the version the repository offers, and running jobs. ``slurmdbd -D`` is a
real process that logs conversion progress for ``convert_s`` seconds, then "listens" until it is
killed. Every tool call is logged with its node, in order, and ``apt-get install`` records whether
a ``policy-rc.d`` forbade service starts while it ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

STUB = r"""
import fcntl, fnmatch, json, os, sys, time

STATE = os.environ["STUB_STATE"]
NODE = os.environ["STUB_NODE"]
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]


def locked(fn):
    with open(STATE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.load(open(STATE))
        out = fn(state)
        json.dump(state, open(STATE, "w"))
        return out


def log(state, what):
    state["log"].append(f"{NODE} {what}")


def main(state):
    node = state["nodes"][NODE]
    log(state, f"{tool} {' '.join(args)}")
    if tool == "systemctl":
        verb, unit = args[0], args[-1]
        if verb == "stop":
            node["active"] = [u for u in node["active"] if u != unit]
        elif verb == "start":
            if unit == "slurmdbd" and state["converted"] != state["repo"]:
                log(state, "ERROR slurmdbd started under systemd before its conversion")
            node["active"].append(unit)
        elif verb == "is-active":
            print("active" if unit in node["active"] else "inactive")
        return 0
    if tool in ("slurmdbd", "slurmctld", "slurmd", "sinfo") and args == ["-V"]:
        print(f"slurm {node['version'].split('-')[0]}")  # the upstream version, as Slurm prints it
        return 0
    if tool == "apt-cache":
        print(f"  Installed: {node['version']}\n  Candidate: {state['repo']}")
        return 0
    if tool == "dpkg-query":
        fmt = next((a[3:] for a in args if a.startswith("-f=")), None)
        fmt = fmt if fmt is not None else args[args.index("-f") + 1]
        fields = {"${Package}": "", "${Version}": node["version"], "${db:Status-Abbrev}": "ii",
                  "${db:Status-Status}": "installed", "\\n": "\n"}  # fmt: skip
        wanted = [a for a in args if not a.startswith("-") and a != fmt]
        for p in node["packages"]:
            if any(fnmatch.fnmatchcase(p, w) for w in wanted):
                out = fmt
                for key, value in {**fields, "${Package}": p}.items():
                    out = out.replace(key, value)
                print(out, end="")
        return 0 if node["packages"] else 1
    if tool == "apt-get":
        if "install" in args:
            policy = os.environ["STUB_POLICY_RC"]
            if not (os.path.exists(policy) and "exit 101" in open(policy).read()):
                log(state, "ERROR apt-get install without policy-rc.d")
            if "slurmdbd" in node["active"] or "slurmctld" in node["active"]:
                log(state, "ERROR packages upgraded under a running daemon")
            node["version"] = state["repo"]
        return 0
    if tool == "mysqldump":
        if "slurmdbd" in node["active"]:
            log(state, "ERROR dump while slurmdbd runs")
        print("-- MariaDB dump 10.19  Distrib 10.11.6-MariaDB")
        print("CREATE TABLE `job_table` (`id_job` int);")
        for job in state["db_jobs"]:
            print(f"INSERT INTO `job_table` VALUES ({job});")
        if state.get("truncate_dump"):
            return 0
        print("-- Dump completed on 2026-11-26 10:00:00")
        return 0
    if tool == "ss":
        if node.get("dbd_listening"):
            print("LISTEN 0 4096 0.0.0.0:6819 0.0.0.0:*")
        return 0
    if tool == "scontrol" and args[:1] == ["ping"]:
        for i, ctl in enumerate(state["controllers"]):
            up = "slurmctld" in state["nodes"][ctl]["active"]
            print(f"Slurmctld({'primary' if i == 0 else 'backup'}) at {ctl} is {'UP' if up else 'DOWN'}")
        return 0
    if tool == "scontrol" or tool == "squeue":
        return 0
    if tool == "sinfo":
        names = args[args.index("-n") + 1].split(",")
        for n in names:
            up = "slurmd" in state["nodes"][n]["active"]
            print(f"{n} {'idle' if up else 'down*'}")
        return 0
    if tool == "chown":
        return 0
    print(f"stub: unexpected {tool} {args}", file=sys.stderr)
    return 2


def convert():
    # slurmdbd -D: the foreground conversion (a real process, killed by the flow)
    node_v = locked(lambda s: s["nodes"][NODE]["version"])
    fail = locked(lambda s: s.get("convert_fails"))
    steps = locked(lambda s: s["convert_steps"])
    for i in range(steps):
        print(f"slurmdbd: converting job table for cluster t ({i + 1}/{steps})", flush=True)
        time.sleep(0.3)
        if fail:
            print("slurmdbd: fatal: conversion failed", flush=True)
            sys.exit(1)

    def done(s):
        s["converted"] = node_v
        s["nodes"][NODE]["dbd_listening"] = True
        log(s, "slurmdbd -D conversion finished, listening")

    locked(done)
    print("slurmdbd: slurmdbd version " + node_v + " started", flush=True)
    while True:
        time.sleep(1)


if tool == "runuser":
    os.execvp(args[3], args[3:])
if tool == "slurmdbd" and "-D" in args:
    locked(lambda s: log(s, "slurmdbd -D"))
    convert()
sys.exit(locked(main))
"""

TOOLS = ("systemctl", "slurmdbd", "slurmctld", "slurmd", "sinfo", "apt-cache", "apt-get", "dpkg-query", "mysqldump",
         "ss", "scontrol", "squeue", "runuser", "chown")  # fmt: skip


def daemons(units: list[str]) -> list[str]:
    """The Slurm daemon packages of a node running ``units`` (Debian's names: one per daemon)."""
    return [u for u in units if u in ("slurmdbd", "slurmctld", "slurmd")]


class StubCluster:
    """The stand-in nodes under ``root``; ``run`` is the flow's runner."""

    def __init__(
        self, root: Path, nodes: dict[str, list[str]], controllers: list[str], running: str, repo: str
    ) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.state = root / "cluster.json"
        self.policy_rc = root / "policy-rc.d"
        state = {
            "nodes": {
                n: {"version": running, "active": list(units), "packages": ["slurm-client", *daemons(units)]}
                for n, units in nodes.items()
            },
            "controllers": controllers,
            "repo": repo,
            "converted": running,
            "convert_steps": 3,
            "db_jobs": [],
            "log": [],
        }
        self.state.write_text(json.dumps(state))
        for tool in TOOLS:
            path = self.bin / tool
            path.write_text(f"#!{sys.executable}\n{STUB}")
            path.chmod(0o755)
        self.calls: list[tuple[str, str]] = []

    def read(self) -> dict[str, Any]:
        return json.loads(self.state.read_text())  # type: ignore[no-any-return]

    def update(self, **values: Any) -> None:
        state = self.read()
        state.update(values)
        self.state.write_text(json.dumps(state))

    def log(self) -> list[str]:
        return list(self.read()["log"])

    def run(self, node: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``command`` in a real ``sh`` as node ``node`` would run it."""
        self.calls.append((node, command))
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "STUB_STATE": str(self.state),
            "STUB_NODE": node,
            "STUB_POLICY_RC": str(self.policy_rc),
        }
        try:
            return subprocess.run(
                ["sh", "-c", command], env=env, capture_output=True, text=True, timeout=min(timeout, 60)
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", "timed out")

"""gpuforge-health in Slurm mode: drain on failure with a gpuforge: reason, resume only its own drains.

A fake ``scontrol`` (and an empty ``lspci``) on PATH stand in for Slurm and the PCI bus.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.validator import nodelocal as nl
from gpuforge.validator.node import base, drain
from gpuforge.validator.node.base import FAIL
from gpuforge.validator.node.framework import Result

FAKE_SCONTROL = r"""#!/usr/bin/env python3
import json, os, sys
state_file = os.environ["FAKE_SLURM_STATE"]
with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
st = json.load(open(state_file))
args = sys.argv[1:]
if args[:2] == ["show", "node"]:
    name = args[-1]
    reason = f" Reason={st['reason']}" if st.get("reason") else ""
    print(f"NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State={st['state']} ThreadsPerCore=1"
          f" Partitions=batch{reason}")
    sys.exit(0)
if args[:1] == ["update"]:
    kv = dict(a.split("=", 1) for a in args[1:])
    if kv.get("State") == "DRAIN":
        st["state"] = "IDLE+DRAIN"
        st["reason"] = kv["Reason"] + " [root@2026-05-01T10:00:00]"
    elif kv.get("State") == "RESUME":
        st["state"] = "IDLE"
        st.pop("reason", None)
    json.dump(st, open(state_file, "w"))
    sys.exit(0)
sys.exit(1)
"""


@pytest.fixture()
def fake_slurm(tmp_path: Path) -> dict[str, Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(FAKE_SCONTROL)
    (bindir / "lspci").write_text("#!/bin/sh\nexit 0\n")  # an empty PCI bus
    for f in bindir.iterdir():
        f.chmod(0o755)
    state = tmp_path / "state.json"
    log = tmp_path / "calls.log"
    log.write_text("")
    return {"bin": bindir, "state": state, "log": log, "dir": tmp_path}


def health(
    fake: dict[str, Path],
    gpus: int,
    state: str,
    reason: str | None = None,
    extra: list[str] | None = None,
    launcher: list[str] | None = None,
) -> tuple[int, str, dict, list]:
    """Run gpuforge-health (the real script) with a config that passes (0 GPUs) or fails (GPUs promised)."""
    fake["state"].write_text(json.dumps({"state": state, **({"reason": reason} if reason else {})}))
    fake["log"].write_text("")
    gpu = {"count": gpus, "model": "H100-80GB", "pci_device_ids": ["2330"]} if gpus else None
    cfg = {"node": "node2", "gpu": gpu}
    cfg_path = fake["dir"] / "health.json"
    cfg_path.write_text(json.dumps(cfg))
    env = {**os.environ, "PATH": f"{fake['bin']}:{os.environ['PATH']}", "FAKE_SLURM_STATE": str(fake["state"]),
           "FAKE_SLURM_LOG": str(fake["log"])}  # fmt: skip
    env.pop("SLURMD_NODENAME", None)
    script = [sys.executable, "-I", nl.__file__, "--config", str(cfg_path), "--checks", "hardware.gpu_count"]
    cmd = [*script, *(extra if extra is not None else ["--slurm"])]
    if launcher:  # e.g. ["slurmd", "-c"]: a shell named slurmd runs the script as its child
        cmd = [*launcher, " ".join(f"'{c}'" for c in cmd) + "; true"]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    calls = [json.loads(line) for line in fake["log"].read_text().splitlines()]
    return cp.returncode, cp.stdout + cp.stderr, json.loads(fake["state"].read_text()), calls


def updates(calls: list) -> list:
    return [c for c in calls if c[:1] == ["update"]]


def test_failure_drains_with_gpuforge_reason(fake_slurm: dict[str, Path]) -> None:
    rc, out, state, calls = health(fake_slurm, gpus=8, state="IDLE")
    assert rc == 1
    assert state["state"] == "IDLE+DRAIN"
    assert state["reason"].startswith(
        "gpuforge: health: hardware.gpu_count: the spec declares 8 x H100-80GB GPUs, but no NVIDIA GPU is on the "
        "PCI bus"
    )
    upd = updates(calls)
    assert len(upd) == 1 and upd[0][:3] == ["update", "NodeName=node2", "State=DRAIN"]
    assert "slurm: drained node2: gpuforge: health:" in out


def test_same_failure_again_does_not_re_drain(fake_slurm: dict[str, Path]) -> None:
    health(fake_slurm, gpus=8, state="IDLE")
    reason = json.loads(fake_slurm["state"].read_text())["reason"]
    rc, out, _, calls = health(fake_slurm, gpus=8, state="IDLE+DRAIN", reason=reason)
    assert rc == 1 and not updates(calls) and "already drained for the same reason" in out


def test_tagged_reason_resumes_when_healthy(fake_slurm: dict[str, Path]) -> None:
    reason = "gpuforge: health: scheduler.munge: munge.service is inactive [root@2026-05-01T10:00:00]"
    rc, out, state, calls = health(fake_slurm, gpus=0, state="IDLE+DRAIN", reason=reason)
    assert rc == 0
    assert updates(calls) == [["update", "NodeName=node2", "State=RESUME"]]
    assert state == {"state": "IDLE"}
    assert "resumed node2" in out


@pytest.mark.parametrize("gpus", [0, 8])
def test_operator_drain_is_never_touched(fake_slurm: dict[str, Path], gpus: int) -> None:
    reason = "disk replacement, ticket 4711 [alice@2026-05-01T09:00:00]"
    rc, out, state, calls = health(fake_slurm, gpus=gpus, state="IDLE+DRAIN", reason=reason)
    assert rc == (1 if gpus else 0)
    assert not updates(calls)
    assert state == {"state": "IDLE+DRAIN", "reason": reason}
    assert "another reason" in out


def test_healthy_idle_node_is_left_alone(fake_slurm: dict[str, Path]) -> None:
    rc, out, _, calls = health(fake_slurm, gpus=0, state="IDLE")
    assert rc == 0 and not updates(calls) and "slurm: healthy" in out


def test_without_slurm_mode_nothing_is_changed(fake_slurm: dict[str, Path]) -> None:
    rc, _, state, calls = health(fake_slurm, gpus=8, state="IDLE", extra=[])
    assert rc == 1 and calls == [] and state == {"state": "IDLE"}


def test_started_by_slurmd_means_slurm_mode(fake_slurm: dict[str, Path]) -> None:
    """HealthCheckProgram takes no arguments: a parent process named slurmd switches Slurm mode on."""
    sh = shutil.which("sh")
    assert sh
    slurmd = fake_slurm["dir"] / "slurmd"
    shutil.copy(sh, slurmd)
    rc, _, state, _ = health(fake_slurm, gpus=8, state="IDLE", extra=[], launcher=[str(slurmd), "-c"])
    assert rc == 0  # the launcher's "; true"
    assert state["state"] == "IDLE+DRAIN" and state["reason"].startswith("gpuforge: health: ")


# pure decision ---------------------------------------------------------------------------------


def _fail(msg: str = "x", severity: str = "critical") -> Result:
    return Result("scheduler.munge", "scheduler", severity, FAIL, msg)


def test_decide_slurm_action() -> None:
    d = drain.decide_slurm_action
    assert d([_fail()], "IDLE", None) == ("drain", "gpuforge: health: scheduler.munge: x")
    assert d([_fail()], "MIXED+DRAIN", "gpuforge: health: old [root@2026-01-01T00:00:00]") == (
        "drain",
        "gpuforge: health: scheduler.munge: x",
    )
    assert d([_fail()], "IDLE+DRAIN", "gpuforge: health: scheduler.munge: x [root@2026-01-01T00:00:00]")[0] is None
    assert d([_fail()], "DRAINED", "maintenance")[0] is None
    assert d([], "IDLE+DRAIN", "gpuforge: health: anything") == ("resume", "")
    assert d([], "DOWN+DRAIN", "gpuforge: health: x") == ("resume", "")
    # gpuforge's own rolling apply and node removal drain with other reasons: never resumed here
    assert d([], "IDLE+DRAIN", "gpuforge: rolling change [root@2026-01-01T00:00:00]")[0] is None
    assert d([_fail()], "IDLE+DRAIN", "gpuforge: removed from spec")[0] is None
    assert d([], "IDLE+DRAIN", "Not responding")[0] is None
    assert d([], "IDLE", None) == (None, "healthy")


def test_reason_is_one_short_line() -> None:
    text = drain.reason_text([_fail('line one\nline "two" ' + "x" * 400)])
    assert text.startswith("gpuforge: health: scheduler.munge: line one line 'two'")
    assert len(text) <= base.MAX_REASON and "\n" not in text


def test_only_critical_failures_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(drain, "scontrol_node", lambda name: ("IDLE", None, ""))
    monkeypatch.setattr(drain, "run_shell", lambda cmd, timeout: calls.append(cmd) or ["__rc=0"])
    assert drain.slurm_update("node2", [_fail(severity="warning")]) == "healthy"
    assert calls == []
    assert drain.slurm_update("node2", [_fail()]).startswith("drained node2")
    assert calls == ["scontrol update NodeName=node2 State=DRAIN 'Reason=gpuforge: health: scheduler.munge: x'"]

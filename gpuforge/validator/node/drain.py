"""Slurm drain / resume of this node by the health check (only its own drains)."""

from __future__ import annotations

import os
import re
import shlex
import socket
from collections.abc import Sequence

from gpuforge.probes._common import split_guarded
from gpuforge.probes.slurm import SCONTROL_NODES
from gpuforge.validator.node.base import CRITICAL, FAIL, MAX_REASON, REASON_TAG, Config
from gpuforge.validator.node.framework import Result
from gpuforge.validator.node.inputs import run_shell


def scontrol_node(name: str) -> tuple[str | None, str | None, str]:
    """(State, Reason, error) of ``name`` from ``scontrol show node -o NAME`` (Reason None when unset)."""
    try:
        command = SCONTROL_NODES.command(name)
    except ValueError as e:
        return None, None, str(e)
    info = SCONTROL_NODES.parse(run_shell(command, SCONTROL_NODES.timeout(name)))
    if info["error"]:
        return None, None, info["error"]
    record = info["nodes"].get(name, {})
    reason = record.get("Reason")
    return record.get("State"), (reason if reason and reason != "(null)" else None), ""


def reason_text(failures: Sequence[Result]) -> str:
    """``gpuforge: health: <id>: <message>; ...`` on one line, short enough for Slurm."""
    body = "; ".join(f"{r.id}: {r.message}" for r in failures)
    body = re.sub(r"\s+", " ", body.replace('"', "'")).strip()
    text = f"{REASON_TAG} {body}"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def decide_slurm_action(failures: Sequence[Result], state: str | None, reason: str | None) -> tuple[str | None, str]:
    """What to do with the node: ``("drain", reason)``, ``("resume", "")`` or ``(None, why not)``.

    Only critical failures drain. A node drained by someone else (reason without our tag:
    an operator, gpuforge's rolling apply) is never touched: not re-drained, never resumed.
    """
    flags = set((state or "").upper().replace("*", "").split("+"))
    drained = bool(flags & {"DRAIN", "DRAINED", "DRAINING"}) or any(f.startswith("DRAIN") for f in flags)
    ours = (reason or "").startswith(REASON_TAG)
    if failures:
        new = reason_text(failures)
        if drained and not ours:
            return None, f"already drained for another reason ({reason or 'none given'}): left as it is"
        if drained and _strip_stamp(reason or "") == new:
            return None, "already drained for the same reason"
        return "drain", new
    if drained and ours:
        return "resume", ""
    if drained:
        return None, f"drained for another reason ({reason or 'none given'}): not resumed"
    return None, "healthy"


def _strip_stamp(reason: str) -> str:
    """Slurm shows reasons as ``text [user@2024-01-01T00:00:00]``."""
    return re.sub(r"\s*\[[^\]@]*@[^\]]*\]\s*$", "", reason).strip()


def slurm_update(node: str, results: Sequence[Result]) -> str:
    """Drain or resume ``node`` after a health run; what was done, for the log."""
    failures = [r for r in results if r.status == FAIL and r.severity == CRITICAL]
    state, reason, error = scontrol_node(node)
    if error:
        return f"cannot read the state of {node}: {error}"
    action, text = decide_slurm_action(failures, state, reason)
    if action is None:
        return text
    args = ["scontrol", "update", f"NodeName={node}"]
    args += ["State=DRAIN", f"Reason={text}"] if action == "drain" else ["State=RESUME"]
    out = split_guarded(run_shell(" ".join(shlex.quote(a) for a in args), SCONTROL_NODES.timeout()))
    if not out.ok:
        return f"{action} {node} failed: {' '.join(out.lines).strip() or out.timeout or f'exit {out.rc}'}"
    return f"{'drained' if action == 'drain' else 'resumed'} {node}" + (f": {text}" if text else "")


def parent_is_slurmd() -> bool:
    """True when slurmd started us (HealthCheckProgram takes no arguments)."""
    try:
        with open(f"/proc/{os.getppid()}/comm") as f:
            return f.read().strip() == "slurmd"
    except OSError:
        return False


def node_name(cfg: Config) -> str:
    """The Slurm node name: SLURMD_NODENAME, the config's node, else ``hostname -s``."""
    return os.environ.get("SLURMD_NODENAME") or str(cfg.get("node") or "") or socket.gethostname().split(".")[0]

"""The node runs the distribution release and CPU architecture its node group says (platform table row),
and systemd runs its managed units as their files are on disk."""

from __future__ import annotations

import math

from gpuforge.probes.platform import runs
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, WARNING, Config, Outcome
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import HARDWARE, NO_UNITS, OS_RELEASE, UNITS, units_for


@check("hardware.platform", "hardware", CRITICAL, "the node runs the spec's OS release and CPU architecture",
       needs=("os_release",))  # fmt: skip
def _platform(ctx: NodeContext) -> Outcome:
    want = ctx.cfg.get("platform")
    if not isinstance(want, dict):
        return SKIP, "the node's config names no platform (rendered by an older gpuforge)"
    info = ctx.read(OS_RELEASE)
    spec_says = f"the spec says {want['title']} on {want['arch']}"
    if info.os_id is None:
        return FAIL, f"cannot read /etc/os-release; {spec_says}"
    if not runs(info, want["os_id"], want["version_id"]):
        return FAIL, f"/etc/os-release says {info.os_id} {info.version_id or '(no VERSION_ID)'}; {spec_says}"
    if info.machine != want["arch"]:
        return FAIL, f"uname -m says {info.machine or 'nothing'}; {spec_says} (packages would be for another CPU)"
    return PASS, f"{want['title']} ({info.os_id} {info.version_id}) on {info.machine}, as the spec says"


def _gate_hardware(cfg: Config) -> str | None:
    return None if isinstance(cfg.get("hardware"), dict) else "no slurmd NodeName figures for this node"


@check("hardware.figures", "hardware", CRITICAL,
       "the node has the sockets, cores, threads and memory its Slurm NodeName line gives it",
       needs=("hardware",), gate=_gate_hardware)  # fmt: skip
def _figures(ctx: NodeContext) -> Outcome:
    want, have = ctx.cfg["hardware"], ctx.read(HARDWARE)
    if have["errors"]:
        return FAIL, f"cannot read the node's hardware: {'; '.join(have['errors'])[:300]}"
    # slurmctld marks a node INVALID when sockets*cores*threads is lower than its NodeName line's
    # ("Node %s has low socket*core*thread count (%d < %d)", src/slurmctld/node_mgr.c) or its memory
    # is below RealMemory; the product counts, not each figure (a VM's 2 sockets x 1 core serve a
    # 1 x 2 line). More than the line gives is left unused: named, not failed.
    layout = ("sockets", "cores_per_socket", "threads_per_core")
    spec_layout = tuple(int(want.get(k, 1)) for k in layout)
    node_layout = (have["sockets"], have["cores_per_socket"], have["threads_per_core"])
    spec_total, node_total = math.prod(spec_layout), math.prod(node_layout)
    shown = f"{' x '.join(map(str, spec_layout))} in the spec, {' x '.join(map(str, node_layout))} on the node"
    differ = [f"sockets x cores x threads: {spec_total} > {node_total} ({shown})"] if spec_total > node_total else []
    more = [] if spec_layout == node_layout else [f"sockets x cores x threads: {shown}"]
    if want.get("real_memory_mb", 0) > have["memory_mb"]:
        differ.append(
            f"real_memory_mb: the spec says {want['real_memory_mb']}, the node has {have['memory_mb']} MiB "
            "(Slurm marks a node with less memory than RealMemory INVALID)"
        )
    if differ:
        return FAIL, "; ".join(differ) + " (gpuforge discover SPEC reads the node's figures)"
    if more:
        why = "more than Slurm is given" if node_total > spec_total else "the same count, which Slurm accepts"
        return PASS, "; ".join(more) + f" ({why}: gpuforge discover SPEC reads the node's figures)"
    return PASS, (
        f"{have['sockets']} x {have['cores_per_socket']} cores x {have['threads_per_core']} threads, "
        f"{have['memory_mb']} MiB (RealMemory {want['real_memory_mb']}), as the spec says"
    )


def _gate_units(cfg: Config) -> str | None:
    return "no unit gpuforge manages runs on this node" if units_for(cfg) == [NO_UNITS] else None


@check("config.units_loaded", "config", WARNING,
       "systemd runs the managed units as their files are on disk (no daemon-reload owed)",
       needs=("units",), gate=_gate_units)  # fmt: skip
def _units_loaded(ctx: NodeContext) -> Outcome:
    units = ctx.read(UNITS)
    if units["error"]:
        return FAIL, f"cannot read the units' state: {units['error']}"
    stale = sorted(name for name, state in units["units"].items() if state and state["NeedDaemonReload"])
    if stale:
        return FAIL, (
            f"{', '.join(stale)}: the unit file or a drop-in changed on disk since systemd loaded it "
            "(restart pending: systemctl daemon-reload, then restart; gpuforge apply does both)"
        )
    known = [name for name, state in units["units"].items() if state and state["LoadState"] == "loaded"]
    return PASS, f"{len(known)} managed unit(s) loaded as they are on disk"

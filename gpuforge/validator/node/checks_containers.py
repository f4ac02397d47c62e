"""Checks of the container toolkit and of a GPU inside a container."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, Config, Outcome
from gpuforge.validator.node.checks_gpu import expected_gpus, gate_toolkit, slurm_role
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.parsers import parse_file, split_markers


@check(
    "toolkit.runtime",
    "toolkit",
    CRITICAL,
    "The nvidia runtime is configured in the container engine",
    needs=("runtime_config", "containerd_dropin", "runtime_binary"),
    gate=gate_toolkit,
)
def _runtime(ctx: NodeContext) -> Outcome:
    c = ctx.cfg.get("container") or {}
    binary = parse_file(ctx.out("runtime_binary"))
    runtime_bin = c.get("runtime_bin")
    if binary is None:
        return FAIL, f"{runtime_bin} not installed (nvidia-container-toolkit missing)"
    engine = c.get("engine")
    if engine == "docker":
        m = split_markers(ctx.out("runtime_config"))
        if m.missing:
            return FAIL, f"{c.get('config_file')} missing: docker has no nvidia runtime"
        try:
            data = json.loads("\n".join(m.lines) or "{}")
        except ValueError as e:
            return FAIL, f"{c.get('config_file')} is not valid JSON: {e}"
        path = ((data.get("runtimes") or {}).get("nvidia") or {}).get("path")
        if path != runtime_bin:
            return FAIL, f"{c.get('config_file')}: runtimes.nvidia.path is {path!r}, want {runtime_bin}"
        return PASS, f"docker runtime nvidia -> {runtime_bin}"
    config = split_markers(ctx.out("runtime_config")).lines
    dropin = split_markers(ctx.out("containerd_dropin")).lines
    joined = "\n".join([*config, *dropin])
    if re.search(r"runtimes\.nvidia\]", joined) and runtime_bin and runtime_bin in joined:
        return PASS, f"containerd runtime nvidia -> {runtime_bin}"
    return FAIL, (
        f"no nvidia runtime with BinaryName {runtime_bin} in {c.get('config_file')} "
        f"or {c.get('containerd_dropin')} (run nvidia-ctk runtime configure --runtime=containerd)"
    )


@check(
    "container.gpu_visible",
    "container",
    CRITICAL,
    "A container sees the GPUs (test image run, else nvidia-container-cli info)",
    depends_on=("toolkit.runtime", "driver.smi"),
    needs=("container",),
    gate=gate_toolkit,
    health=False,
)
def _container(ctx: NodeContext) -> Outcome:
    lines = ctx.out("container")
    m = split_markers(lines)
    mode = m.markers.get("mode", "cli")
    want = expected_gpus(ctx.cfg)
    if m.missing:
        return FAIL, "nvidia-container-cli not found (libnvidia-container-tools missing)"
    if m.timeout:
        return FAIL, "the container check did not finish in time"
    if m.rc not in (0, None):
        tail = next((line.strip() for line in reversed(m.lines) if line.strip()), f"exit {m.rc}")
        return FAIL, f"{'container run' if mode != 'cli' else 'nvidia-container-cli info'} failed: {tail}"
    if mode == "cli":
        seen = sum(1 for line in m.lines if line.strip().startswith("Device Index:"))
        what = "nvidia-container-cli info (no test image present)"
    else:
        seen = sum(1 for line in m.lines if re.match(r"^GPU \d+: ", line))
        what = f"nvidia-smi -L in a container ({mode})"
    if seen < want:
        return FAIL, f"{what} shows {seen} of {want} GPUs"
    return PASS, f"{what} shows {seen} GPU(s)"


# -- scheduler (node side)


def gate_slurm(cfg: Config) -> str | None:
    return None if slurm_role(cfg) else "not a Slurm node"


def gate_role(role: str, what: str) -> Callable[[Config], str | None]:
    def gate(cfg: Config) -> str | None:
        return None if slurm_role(cfg, role) else f"not a Slurm {what} node"

    return gate

"""Checks of the container toolkit and of a GPU inside a container."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, Config, Outcome
from gpuforge.validator.node.checks_gpu import expected_gpus, gate_toolkit, slurm_role
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import CONTAINER, CONTAINERD_DROPIN, RUNTIME_BINARY, RUNTIME_CONFIG


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
    runtime_bin = c.get("runtime_bin")
    if ctx.read(RUNTIME_BINARY).get(str(runtime_bin)) is None:
        return FAIL, f"{runtime_bin} not installed (nvidia-container-toolkit missing)"
    config = ctx.read(RUNTIME_CONFIG)
    if c.get("engine") == "docker":
        if config.missing:
            return FAIL, f"{c.get('config_file')} missing: docker has no nvidia runtime"
        try:
            data = json.loads("\n".join(config.lines) or "{}")
        except ValueError as e:
            return FAIL, f"{c.get('config_file')} is not valid JSON: {e}"
        path = ((data.get("runtimes") or {}).get("nvidia") or {}).get("path")
        if path != runtime_bin:
            return FAIL, f"{c.get('config_file')}: runtimes.nvidia.path is {path!r}, want {runtime_bin}"
        return PASS, f"docker runtime nvidia -> {runtime_bin}"
    joined = "\n".join([*config.lines, *ctx.read(CONTAINERD_DROPIN).lines])
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
    info = ctx.read(CONTAINER)
    out, want = info.output, expected_gpus(ctx.cfg)
    if out.missing:
        return FAIL, "nvidia-container-cli not found (libnvidia-container-tools missing)"
    if out.timeout:
        return FAIL, "the container check did not finish in time"
    if out.rc not in (0, None):
        return FAIL, f"{'container run' if info.mode != 'cli' else 'nvidia-container-cli info'} failed: " + (
            out.last_line() or f"exit {out.rc}"
        )
    if info.mode == "cli":
        what = "nvidia-container-cli info (no test image present)"
    else:
        what = f"nvidia-smi -L in a container ({info.mode})"
    if info.gpus < want:
        return FAIL, f"{what} shows {info.gpus} of {want} GPUs"
    return PASS, f"{what} shows {info.gpus} GPU(s)"


# -- scheduler (node side)


def gate_slurm(cfg: Config) -> str | None:
    return None if slurm_role(cfg) else "not a Slurm node"


def gate_role(role: str, what: str) -> Callable[[Config], str | None]:
    def gate(cfg: Config) -> str | None:
        return None if slurm_role(cfg, role) else f"not a Slurm {what} node"

    return gate

"""Whether a container sees the GPUs: a test image's ``nvidia-smi -L``, else ``nvidia-container-cli info``.

The node check runs a test image when the engine has it locally (never a pull), through docker
or containerd's ``ctr``; otherwise it asks libnvidia-container directly which GPUs a container
would get. ``__mode=`` says which one ran.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from gpuforge.probes._common import CommandOutput, guarded, parse_marker, split_guarded
from gpuforge.probes.reading import Reading

CONTAINER_MODES = ("docker", "ctr", "cli")


def container_gpus_command(engine: str = "none", image: str = "") -> str:
    """Run ``image`` (when present locally) with the GPUs, else ``nvidia-container-cli info``."""
    run = ""
    if image and engine == "docker":
        run = (
            f"if docker image inspect {shlex.quote(image)} >/dev/null 2>&1; then echo '__mode=docker'; "
            f'docker run --rm --gpus all {shlex.quote(image)} nvidia-smi -L 2>&1; echo "__rc=$?"; exit 0; fi; '
        )
    elif image and engine == "containerd":
        run = (
            f"if ctr -n default images ls -q 2>/dev/null | grep -Fxq {shlex.quote(image)}; then echo '__mode=ctr'; "
            f"ctr -n default run --rm --gpus 0 {shlex.quote(image)} gpuforge-validate nvidia-smi -L 2>&1; "
            'echo "__rc=$?"; exit 0; fi; '
        )
    return run + "echo '__mode=cli'; " + guarded("nvidia-container-cli", "nvidia-container-cli info")


@dataclass
class ContainerGpus:
    """What :data:`CONTAINER_GPUS` reads: how it looked (``mode``), how that went, the GPUs it saw."""

    mode: str
    output: CommandOutput
    gpus: int


def parse_container_gpus(lines: list[str]) -> ContainerGpus:
    """Count ``GPU n:`` lines (``nvidia-smi -L`` in a container) or ``Device Index:`` lines (cli)."""
    mode, rest = "cli", []
    for line in lines:
        marker = parse_marker(line)
        if marker is not None and marker[0] == "mode":
            mode = marker[1].strip()
        else:
            rest.append(line)
    out = split_guarded(rest)
    if mode == "cli":
        gpus = sum(1 for line in out.lines if line.strip().startswith("Device Index:"))
    else:
        gpus = sum(1 for line in out.lines if re.match(r"^GPU \d+: ", line))
    return ContainerGpus(mode, out, gpus)


CONTAINER_GPUS: Reading[ContainerGpus] = Reading(
    "containers.gpus", container_gpus_command, parse_container_gpus, timeout_s=120.0
)

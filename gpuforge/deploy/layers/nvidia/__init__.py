"""NVIDIA host stack: driver, container engine and toolkit, enroot + pyxis, MIG, DCGM.

Every host runs the same eight operations in this order (empty layers where a node does
not need one, which costs no round trip):

1. nvidia-repos: apt/dnf sources and version pins (Debian non-free, NVIDIA's CUDA and
   libnvidia-container repositories, from ``sources``)
2. nvidia-driver: driver packages at the pin, nouveau blacklist (+ initramfs), persistence
   daemon, fabric manager on NVSwitch boards, optional CUDA toolkit
3. container-engine: containerd or docker with the rendered configs (nvidia runtime)
4. nvidia-container-toolkit: the four toolkit packages pinned together, the CDI spec
5. enroot: release packages and configs
6. pyxis: built on the node against the installed Slurm, only when a version changes
7. nvidia-mig: nvidia-mig-manager and the node's layout (a new layout is a rolling change)
8. nvidia-dcgm: DCGM and dcgm-exporter

Decisions come from facts: ``NvidiaHost`` (GPUs on the PCI bus, loaded driver; one round
trip per GPU node) when the layers are built, the batched layer facts when they are planned.
What a run cannot do itself is recorded for the orchestrator and shown by ``gpuforge plan``
as steps without a command: ``reboot-required``, ``rolling`` (drain first), ``unavailable``
(the spec's sources cannot provide a component) and ``note``.
"""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host
from pyinfra.api import deploy

from gpuforge.deploy.context import node, run_state, spec
from gpuforge.deploy.converge import Layer
from gpuforge.deploy.facts.nvidia import NvidiaHost
from gpuforge.deploy.layers.nvidia.container import engine_layer, toolkit_layer
from gpuforge.deploy.layers.nvidia.dcgm import dcgm_layer
from gpuforge.deploy.layers.nvidia.driver import driver_layer
from gpuforge.deploy.layers.nvidia.enroot import enroot_layer, pyxis_layer
from gpuforge.deploy.layers.nvidia.mig import mig_layer
from gpuforge.deploy.layers.nvidia.repos import repos_layer
from gpuforge.deploy.nvidia_needs import (
    Ctx,
    host_packages,
    needs_host_facts,
)
from gpuforge.deploy.operations.layer import converge
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.spec.roles import deploys_for

LAYERS: tuple[tuple[str, Callable[[Ctx], Layer]], ...] = (
    ("package sources and pins", repos_layer),
    ("driver", driver_layer),
    ("container engine", engine_layer),
    ("container toolkit and CDI", toolkit_layer),
    ("enroot", enroot_layer),
    ("pyxis", pyxis_layer),
    ("MIG", mig_layer),
    ("DCGM and dcgm-exporter", dcgm_layer),
)
LAYER_NAMES = (
    "nvidia-repos",
    "nvidia-driver",
    "container-engine",
    "nvidia-container-toolkit",
    "enroot",
    "pyxis",
    "nvidia-mig",
    "nvidia-dcgm",
)


def nvidia_layers(ctx: Ctx | None) -> list[tuple[str, Layer]]:
    """The eight layers of a node in the fixed order (empty ones where it needs none)."""
    out = []
    for (title, build), name in zip(LAYERS, LAYER_NAMES, strict=True):
        out.append((title, build(ctx) if ctx is not None else Layer.empty(name)))
    return out


@deploy("gpuforge nvidia")
def nvidia() -> None:
    s = spec()
    n = node()
    ctx = None
    if "nvidia" in deploys_for(n) and run_state().converges(host.name, "nvidia"):  # no read on a token host
        hf = host.get_fact(NvidiaHost, packages=host_packages(s, n)) if needs_host_facts(s, n) else HostFacts()
        ctx = Ctx.build(s, n, hf, host.name, run_state())
    for title, layer in nvidia_layers(ctx):
        converge(name=f"nvidia: {title}", layer=layer)

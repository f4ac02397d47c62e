"""health: ``/usr/local/sbin/gpuforge-health`` and its ``/etc/gpuforge/health.json`` on Slurm nodes.

The program is ``gpuforge.validator.nodelocal`` with the probes it uses, built into one file
(``gpuforge.validator.program``); the config is
``health_config(spec, node)``. slurm.conf names the program as HealthCheckProgram, so
slurmd runs it every HealthCheckInterval; it drains the node on a critical failure and
resumes only nodes it drained itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyinfra.api import deploy

from gpuforge.deploy.context import node, spec
from gpuforge.deploy.converge import Directory, Layer
from gpuforge.deploy.layers import ROLE_DEPLOYS
from gpuforge.deploy.operations.layer import converge
from gpuforge.render.files import RenderedFile
from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node
from gpuforge.validator.config import HEALTH_CONFIG, HEALTH_PROGRAM, health_config
from gpuforge.validator.program import node_program


def health_program() -> bytes:
    """The node-local checker: ``nodelocal`` and the probes it uses, built into one file."""
    return node_program()


def health_config_text(s: Spec, n: Node) -> str:
    return json.dumps(health_config(s, n), indent=2, sort_keys=True) + "\n"


def wants_health(s: Spec, n: Node) -> bool:
    """Slurm nodes whose roles take the health layer (roles.ROLE_DEPLOYS)."""
    return s.slurm is not None and any("health" in ROLE_DEPLOYS[r] for r in n.roles)


def health_layer(s: Spec, n: Node) -> Layer:
    return Layer(
        "health",
        directories=(Directory(str(Path(HEALTH_CONFIG).parent), "0755"),),
        files=[
            RenderedFile(HEALTH_PROGRAM, health_program(), mode="0755"),
            RenderedFile(HEALTH_CONFIG, health_config_text(s, n), mode="0644"),
        ],
    )


@deploy("gpuforge health")
def health() -> None:
    s, n = spec(), node()
    converge(
        name="health: gpuforge-health and its config",
        layer=health_layer(s, n) if wants_health(s, n) else Layer.empty("health"),
    )

"""health: ``/usr/local/sbin/gpuforge-health`` and its ``/etc/gpuforge/health.json`` on Slurm nodes.

The program is ``gpuforge.validator.nodelocal`` with the probes it uses, built into one file
(``gpuforge.render.node_program``); the config is
``health_config(spec, node, managed, key)``, rendered with the cluster's real secrets (its keyed
digests are of the files the node really gets) beside the node's HMAC key (0600, a secret).
slurm.conf names the program as HealthCheckProgram, so slurmd runs it every HealthCheckInterval;
it drains the node on a critical failure and resumes only nodes it drained itself.
"""

from __future__ import annotations

from pathlib import Path

from pyinfra.api import deploy

from gpuforge.deploy.context import node, secrets, spec
from gpuforge.deploy.converge import Directory, Layer
from gpuforge.deploy.operations.layer import converge
from gpuforge.render import render_managed
from gpuforge.render.files import Secrets
from gpuforge.render.health import HEALTH_CONFIG, health_files, wants_health
from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node


def health_layer(s: Spec, n: Node, sec: Secrets | None = None) -> Layer:
    """``sec``: the cluster's real secrets (None: redacted, as ``render`` shows the layer)."""
    return Layer(
        "health",
        directories=(Directory(str(Path(HEALTH_CONFIG).parent), "0755"),),
        files=health_files(s, n, sec, render_managed(s, n, sec)),
    )


@deploy("gpuforge health")
def health() -> None:
    s, n = spec(), node()
    converge(
        name="health: gpuforge-health and its config",
        layer=health_layer(s, n, secrets()) if wants_health(s, n) else Layer.empty("health"),
    )

"""Distro packages of all of a node's layers, installed in one apt transaction.

Each layer still declares (and checks) its own packages; installing their union up front
costs one dpkg run instead of one per layer, which is most of a first apply's time. It runs
right after the base layer, which sets the package proxy and the fixed service accounts.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from gpuforge.deploy.context import node, secrets, spec
from gpuforge.deploy.converge import Layer
from gpuforge.deploy.layers.base import base_layer
from gpuforge.deploy.layers.monitoring import monitoring_layers
from gpuforge.deploy.layers.munge import munge_layer
from gpuforge.deploy.layers.slurm import accounting_layer, config_layer
from gpuforge.deploy.operations.layer import converge, repair_packages
from gpuforge.deploy.runstate import RunState
from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for


def distro_packages(s: Spec, n: Node, host_name: str) -> list[str]:
    """Every Debian package the base, munge, Slurm and monitoring layers want on ``n``."""
    wanted = deploys_for(n)
    layers = [base_layer(s, n)]
    if s.slurm is not None and "slurm" in wanted:
        sec = secrets()
        layers.append(munge_layer(sec))
        if n.has(Role.ACCOUNTING_DB) and s.slurm.accounting.enabled:
            layers.append(accounting_layer(s, sec, n.os.is_deb))
        layers.append(config_layer(s, n, sec, host_name, RunState()))  # read for its packages only
    layers.extend(monitoring_layers(s, n, "monitoring" in wanted))
    return list(dict.fromkeys(p for layer in layers for p in layer.packages))


@deploy("gpuforge packages")
def packages() -> None:
    s, n = spec(), node()
    names = distro_packages(s, n, host.name) if n.os.is_deb else []
    repair_packages(name="packages: repair an interrupted package run", packages=tuple(names))
    converge(
        name="packages: every layer's distro packages in one transaction",
        layer=Layer("packages", packages=tuple(names)) if names else Layer.empty("packages"),
    )

"""munge: one cluster key (0400 munge:munge) on every Slurm node, munge running."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, secrets, spec
from gpuforge.deploy.converge import Directory, Layer, Service
from gpuforge.deploy.operations.layer import converge
from gpuforge.render.files import Secrets
from gpuforge.render.health import MUNGE_KEY
from gpuforge.render.slurm import munge_key_file
from gpuforge.spec.roles import deploys_for


def munge_layer(sec: Secrets) -> Layer:
    key = munge_key_file(sec)
    return Layer(
        "munge",
        packages=("munge",),
        directories=(Directory("/etc/munge", "0700", "munge", "munge"),),
        files=[key],
        services=(Service("munge", restart_on=(MUNGE_KEY,)),),
    )


@deploy("gpuforge munge")
def munge() -> None:
    on = spec().slurm is not None and "munge" in deploys_for(node())
    converge(name="munge: key and daemon", layer=munge_layer(secrets()) if on else Layer.empty("munge"))

"""munge: one cluster key (0400 munge:munge) on every Slurm node, munge running."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, secrets, spec
from gpuforge.deploy.converge import Directory, Layer, Service
from gpuforge.deploy.layers import deploys_for
from gpuforge.deploy.operations.layer import converge
from gpuforge.render.files import RenderedFile, Secrets

MUNGE_KEY = "/etc/munge/munge.key"


def munge_layer(sec: Secrets) -> Layer:
    key = RenderedFile(MUNGE_KEY, sec.munge_key, mode="0400", owner="munge", group="munge", secret=True)
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

"""Every layer a node's roles need, in the cluster-wide order (``gpuforge.spec.roles.LAYER_ORDER``).

GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/site.py
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from gpuforge.deploy.layers import load_deploy
from gpuforge.deploy.runstate import RUN_STATE_KEY
from gpuforge.spec.roles import LAYER_ORDER


@deploy("gpuforge site")
def site() -> None:
    # Every host walks every layer; each deploy turns itself into no-ops where the
    # node's roles do not need it (see gpuforge.spec.roles.deploys_for). A run in segments
    # (site Ansible steps between layers) walks only its segment's layers.
    run = host.data.get(RUN_STATE_KEY)
    layers = run.layers if run is not None and run.layers is not None else LAYER_ORDER
    for name in layers:
        load_deploy(name)()

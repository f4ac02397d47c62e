"""Every layer a node's roles need, in the cluster-wide order (``gpuforge.spec.roles.LAYER_ORDER``).

GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/site.py
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.layers import load_deploy
from gpuforge.spec.roles import LAYER_ORDER


@deploy("gpuforge site")
def site() -> None:
    # Every host walks every layer; each deploy turns itself into no-ops where the
    # node's roles do not need it (see gpuforge.spec.roles.deploys_for).
    for name in LAYER_ORDER:
        load_deploy(name)()

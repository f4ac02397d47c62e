"""Entry point for the plain pyinfra CLI: the munge layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/munge.py

The deploy itself is ``gpuforge.deploy.layers.munge`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.munge import munge

if run_as_cli_deploy(globals()):
    munge()

"""Entry point for the plain pyinfra CLI: the packages layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/packages.py

The deploy itself is ``gpuforge.deploy.layers.packages`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.packages import packages

if run_as_cli_deploy(globals()):
    packages()

"""Entry point for the plain pyinfra CLI: the base layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/base.py

The deploy itself is ``gpuforge.deploy.layers.base`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.base import base

if run_as_cli_deploy(globals()):
    base()

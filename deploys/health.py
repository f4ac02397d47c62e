"""Entry point for the plain pyinfra CLI: the health layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/health.py

The deploy itself is ``gpuforge.deploy.layers.health`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.health import health

if run_as_cli_deploy(globals()):
    health()

"""Entry point for the plain pyinfra CLI: the monitoring layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/monitoring.py

The deploy itself is ``gpuforge.deploy.layers.monitoring`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.monitoring import monitoring

if run_as_cli_deploy(globals()):
    monitoring()

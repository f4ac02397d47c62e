"""Entry point for the plain pyinfra CLI: every layer a node's roles need, in order.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/site.py

The deploy itself is ``gpuforge.deploy.layers.site`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.site import site

if run_as_cli_deploy(globals()):
    site()

"""Entry point for the plain pyinfra CLI: the nvidia layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/nvidia.py

The deploy itself is ``gpuforge.deploy.layers.nvidia`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.nvidia import nvidia

if run_as_cli_deploy(globals()):
    nvidia()

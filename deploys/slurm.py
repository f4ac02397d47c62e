"""Entry point for the plain pyinfra CLI: the slurm layer.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/slurm.py

The deploy itself is ``gpuforge.deploy.layers.slurm`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.slurm import slurm

if run_as_cli_deploy(globals()):
    slurm()

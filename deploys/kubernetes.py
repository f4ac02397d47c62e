"""Entry point for the plain pyinfra CLI: the kubernetes layer (node prerequisites, manifests).

    GPUFORGE_SPEC=inventories/k8s-gpu-operator.yaml pyinfra inventories/from_spec.py deploys/kubernetes.py

The deploy itself is ``gpuforge.deploy.layers.kubernetes`` (what ``gpuforge apply`` runs).
"""

from gpuforge.deploy.context import run_as_cli_deploy
from gpuforge.deploy.layers.kubernetes import kubernetes

if run_as_cli_deploy(globals()):
    kubernetes()

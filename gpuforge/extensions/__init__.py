"""The site's own content, run from the spec: Ansible roles and playbooks through ansible-runner.

Nothing here imports pyinfra; ``gpuforge.orchestrate`` runs these steps between the layers.
"""

"""pyinfra inventory adapter: run any gpuforge deploy with the plain pyinfra CLI.

    GPUFORGE_SPEC=inventories/lab.yaml pyinfra inventories/from_spec.py deploys/site.py

Groups: ``nodes``, ``role_<role>`` (e.g. ``role_compute``) and ``group_<node group>``.
"""

import os

from gpuforge.deploy.inventory import inventory_groups
from gpuforge.spec.cluster import load_cluster

_path = os.environ.get("GPUFORGE_SPEC")
if not _path:
    raise SystemExit("set GPUFORGE_SPEC to the cluster spec file")

for _name, _hosts in inventory_groups(load_cluster(_path)).items():
    globals()[_name] = _hosts

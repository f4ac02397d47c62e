"""The spec as a pyinfra inventory: one host per node, groups per role and node group.

Host-key checking stays on: the spec's known_hosts file (or the user's own) is used
with ``StrictHostKeyChecking=yes``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuforge.deploy.runstate import RUN_STATE_KEY, RunState
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.model import Connector
from gpuforge.spec.nodes import Node

HostEntry = tuple[str, dict[str, Any]]


def host_data(spec: Spec, spec_path: str | Path, node: Node) -> dict[str, Any]:
    """pyinfra host data for one node (connection settings + where to find the spec)."""
    data: dict[str, Any] = {
        "gpuforge_spec_path": str(Path(spec_path).resolve()),
        "gpuforge_node": node.name,
        "ssh_user": spec.ssh.user,
        "ssh_port": spec.ssh.port,
        "ssh_strict_host_key_checking": "yes",
    }
    if node.connector is Connector.SSH:
        data["ssh_hostname"] = node.ssh_target
    if spec.ssh.key:
        data["ssh_key"] = os.path.expanduser(spec.ssh.key)
    if spec.ssh.known_hosts:
        data["ssh_known_hosts_file"] = os.path.expanduser(spec.ssh.known_hosts)
    if spec.ssh.sudo:
        data["_sudo"] = True
    return data


def host_name(node: Node) -> str:
    """pyinfra host name: the node name, or pyinfra's vagrant connector form."""
    return f"@vagrant/{node.name}" if node.connector is Connector.VAGRANT else node.name


def inventory_groups(
    spec: Spec, spec_path: str | Path, limit: list[str] | None = None, run: RunState | None = None
) -> dict[str, list[HostEntry]]:
    """Groups of (host name, data): ``nodes``, one per role (``role_<name>``) and per node group.

    Every host's data holds the run's :class:`RunState` (a new one unless ``run`` is given).
    """
    run = run if run is not None else RunState()
    groups: dict[str, list[HostEntry]] = {"nodes": []}
    for node in resolve_nodes(spec):
        if limit is not None and node.name not in limit:
            continue
        entry = (host_name(node), {**host_data(spec, spec_path, node), RUN_STATE_KEY: run})
        groups["nodes"].append(entry)
        for role in sorted(node.roles):
            groups.setdefault("role_" + role.value.replace("-", "_"), []).append(entry)
        groups.setdefault("group_" + node.group.replace("-", "_"), []).append(entry)
    return groups

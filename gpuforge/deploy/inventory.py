"""The spec as a pyinfra inventory: one host per node, groups per role and node group.

Host-key checking stays on: the spec's known_hosts file (or the user's own) is used
with ``StrictHostKeyChecking=yes``. Vagrant nodes are plain SSH hosts too: their address, port,
user and key come from ``vagrant ssh-config`` in the spec's folder (as for the validator and
Ansible), never with Vagrant's own host-key options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuforge.deploy.runstate import RUN_STATE_KEY, RunState
from gpuforge.probes.vagrant import VagrantHost, machines_for
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.model import Connector
from gpuforge.spec.nodes import Node

HostEntry = tuple[str, dict[str, Any]]


def host_data(
    spec: Spec, spec_path: str | Path, node: Node, vagrant: Mapping[str, VagrantHost] | None = None
) -> dict[str, Any]:
    """pyinfra host data for one node (connection settings + where to find the spec).

    ``vagrant``: ``vagrant ssh-config`` per machine; a vagrant node must be in it.
    """
    data: dict[str, Any] = {
        "gpuforge_spec_path": str(Path(spec_path).resolve()),
        "gpuforge_node": node.name,
        "ssh_user": spec.ssh.user,
        "ssh_port": spec.ssh.port,
        "ssh_strict_host_key_checking": "yes",
        # No retries of pyinfra's: gpuforge.deploy.connect tries again only a connection the
        # node's sshd dropped (a busy sshd), never a refusal, a timeout or a host-key failure.
        "ssh_connect_retries": 0,
    }
    if node.connector is Connector.SSH:
        data["ssh_hostname"] = node.ssh_target
    if spec.ssh.key:
        data["ssh_key"] = os.path.expanduser(spec.ssh.key)
    if spec.ssh.known_hosts:
        data["ssh_known_hosts_file"] = os.path.expanduser(spec.ssh.known_hosts)
    if node.connector is Connector.VAGRANT:
        vh = (vagrant or {}).get(node.name)
        if vh is None:
            raise LookupError(f"{node.name}: no 'vagrant ssh-config' entry for this vagrant node")
        data.update(ssh_hostname=vh.hostname, ssh_port=vh.port, ssh_user=vh.user)
        if vh.identity_file:
            data["ssh_key"] = vh.identity_file
    if spec.ssh.sudo:
        data["_sudo"] = True
    return data


def inventory_groups(
    spec: Spec, spec_path: str | Path, limit: list[str] | None = None, run: RunState | None = None
) -> dict[str, list[HostEntry]]:
    """Groups of (host name, data): ``nodes``, one per role (``role_<name>``) and per node group.

    Every host's data holds the run's :class:`RunState` (a new one unless ``run`` is given).
    Vagrant nodes are looked up with one ``vagrant ssh-config`` in the spec's folder; it raises
    :class:`gpuforge.probes.vagrant.VagrantError` when vagrant cannot list them all.
    """
    run = run if run is not None else RunState()
    nodes = [n for n in resolve_nodes(spec) if limit is None or n.name in limit]
    spec_dir = str(Path(spec_path).resolve().parent)
    vagrant = machines_for([n.name for n in nodes if n.connector is Connector.VAGRANT], spec_dir)
    groups: dict[str, list[HostEntry]] = {"nodes": []}
    for node in nodes:
        entry = (node.name, {**host_data(spec, spec_path, node, vagrant), RUN_STATE_KEY: run})
        groups["nodes"].append(entry)
        for role in sorted(node.roles):
            groups.setdefault("role_" + role.value.replace("-", "_"), []).append(entry)
        groups.setdefault("group_" + node.group.replace("-", "_"), []).append(entry)
    return groups

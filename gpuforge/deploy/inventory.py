"""The spec as a pyinfra inventory: one host per node, groups per role and node group.

Host-key checking stays on: the spec's known_hosts file (or the user's own) is used
with ``StrictHostKeyChecking=yes``. Vagrant nodes are plain SSH hosts too: their address, port,
user and key come from ``vagrant ssh-config`` in the spec's folder (as for the validator and
Ansible), never with Vagrant's own host-key options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuforge.deploy.runstate import RUN_STATE_KEY, SPEC_KEY, RunState
from gpuforge.probes.vagrant import VagrantHost, machines_for
from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.model import Connector
from gpuforge.spec.nodes import Node

HostEntry = tuple[str, dict[str, Any]]


def host_data(cluster: Cluster, node: Node, vagrant: Mapping[str, VagrantHost] | None = None) -> dict[str, Any]:
    """pyinfra host data for one node (connection settings + the loaded spec, and where it came from:
    a deploy reads the spec from here, never from the file again, :func:`gpuforge.deploy.context.spec`).

    ``vagrant``: ``vagrant ssh-config`` per machine; a vagrant node must be in it.
    """
    spec = cluster.spec
    data: dict[str, Any] = {
        SPEC_KEY: spec,
        "gpuforge_spec_path": str(cluster.source),
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
    if cluster.ssh_key is not None:
        data["ssh_key"] = str(cluster.ssh_key)
    if cluster.known_hosts is not None:
        data["ssh_known_hosts_file"] = str(cluster.known_hosts)
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
    cluster: Cluster, limit: list[str] | None = None, run: RunState | None = None
) -> dict[str, list[HostEntry]]:
    """Groups of (host name, data): ``nodes``, one per role (``role_<name>``) and per node group.

    Every host's data holds the run's :class:`RunState` (a new one unless ``run`` is given).
    Vagrant nodes are looked up with one ``vagrant ssh-config`` in the spec's folder; it raises
    :class:`gpuforge.probes.vagrant.VagrantError` when vagrant cannot list them all.
    """
    run = run if run is not None else RunState()
    nodes = [n for n in resolve_nodes(cluster.spec) if limit is None or n.name in limit]
    spec_dir = str(cluster.folder)
    vagrant = machines_for([n.name for n in nodes if n.connector is Connector.VAGRANT], spec_dir)
    groups: dict[str, list[HostEntry]] = {"nodes": []}
    for node in nodes:
        entry = (node.name, {**host_data(cluster, node, vagrant), RUN_STATE_KEY: run})
        groups["nodes"].append(entry)
        for role in sorted(node.roles):
            groups.setdefault("role_" + role.value.replace("-", "_"), []).append(entry)
        groups.setdefault("group_" + node.group.replace("-", "_"), []).append(entry)
    return groups

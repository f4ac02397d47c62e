"""The spec as an Ansible inventory: one host per node, groups per role and per node group.

The same connection settings as gpuforge's own deploys: the spec's SSH user, port and key,
host-key checking ON (``StrictHostKeyChecking=yes`` with the spec's known_hosts), privilege
through ``become`` for a non-root user with ``ssh.sudo``. Group names are Ansible-safe
(``role_compute``, ``group_gpu``: the same names gpuforge's pyinfra inventory uses).

Ansible templates every string of an inventory it reads, so a ``{{ lookup('pipe', ...) }}`` in a
host variable would run on the control host. Every string variable is written as
``{"__ansible_unsafe": value}``, the JSON form of Ansible's unsafe text (what
``ansible-inventory --list`` itself writes for ``!unsafe`` values; ansible/ansible#82999): it is
used as it is and never templated. Host and group names (the keys) are spec names, never templated.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

from gpuforge.probes.vagrant import VagrantHost
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.model import Connector
from gpuforge.spec.nodes import Node

#: The JSON key Ansible's loader reads as "this string is unsafe: never template it".
UNSAFE_KEY = "__ansible_unsafe"


def unsafe(value: Any) -> Any:
    """``value`` with every string in it marked unsafe for Ansible (``{"__ansible_unsafe": s}``);
    numbers, booleans and None as they are."""
    if isinstance(value, str):
        return {UNSAFE_KEY: value}
    if isinstance(value, dict):
        return {k: unsafe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [unsafe(v) for v in value]
    return value


def unwrapped(value: Any) -> Any:
    """``value`` with :func:`unsafe`'s marks taken off again (what Ansible's variables hold)."""
    if isinstance(value, dict):
        if set(value) == {UNSAFE_KEY}:
            return value[UNSAFE_KEY]
        return {k: unwrapped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrapped(v) for v in value]
    return value


def role_group(role_value: str) -> str:
    return "role_" + role_value.replace("-", "_")


def node_group(group: str) -> str:
    return "group_" + group.replace("-", "_")


def target_groups(spec: Spec, targets: list[str]) -> list[str]:
    """Inventory groups for spec targets (role or node-group names); ``['all']`` when none."""
    if not targets:
        return ["all"]
    roles = {r.value for n in resolve_nodes(spec) for r in n.roles}
    groups = {g.name for g in spec.node_groups}
    out = []
    for t in targets:
        if t in groups:
            out.append(node_group(t))
        if t in roles:
            out.append(role_group(t))
    return out


def ssh_common_args(spec: Spec) -> str:
    """OpenSSH options every connection uses: host keys checked against the spec's known_hosts."""
    args = ["-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
    if spec.ssh.known_hosts:
        args += ["-o", f"UserKnownHostsFile={os.path.expanduser(spec.ssh.known_hosts)}"]
    return shlex.join(args)


def vagrant_hosts(spec: Spec, spec_dir: str) -> dict[str, VagrantHost] | None:
    """``vagrant ssh-config`` of the spec's folder when a node uses the vagrant connector (else None).

    Raises RuntimeError/OSError when vagrant cannot answer.
    """
    if not any(n.connector is Connector.VAGRANT for n in resolve_nodes(spec)):
        return None
    from gpuforge.probes.vagrant import ssh_config

    return dict(ssh_config(spec_dir))


def _host_vars(spec: Spec, node: Node, vagrant: Mapping[str, VagrantHost]) -> dict[str, Any]:
    host, port, user, key = node.ssh_target, spec.ssh.port, spec.ssh.user, spec.ssh.key
    if node.connector is Connector.VAGRANT:
        vh = vagrant.get(node.name)
        if vh is None:
            raise LookupError(f"{node.name}: 'vagrant ssh-config' has no machine of that name (is it up?)")
        host, port, user, key = vh.hostname, vh.port, vh.user, vh.identity_file or key
    hv: dict[str, Any] = {"ansible_host": host, "ansible_port": port, "ansible_user": user}
    if key:
        hv["ansible_ssh_private_key_file"] = os.path.expanduser(key)
    return hv


def ansible_inventory(
    spec: Spec, limit: list[str] | None = None, vagrant: Mapping[str, VagrantHost] | None = None
) -> dict[str, Any]:
    """The JSON inventory (``all: {hosts, vars, children}``) of the nodes in ``limit`` (all: None);
    every string variable marked unsafe (:func:`unsafe`), so Ansible never templates a spec value."""
    hosts: dict[str, dict[str, Any]] = {}
    children: dict[str, dict[str, Any]] = {}
    for node in resolve_nodes(spec):
        if limit is not None and node.name not in limit:
            continue
        hosts[node.name] = unsafe(_host_vars(spec, node, vagrant or {}))
        for name in [*(role_group(r.value) for r in sorted(node.roles)), node_group(node.group)]:
            children.setdefault(name, {"hosts": {}})["hosts"][node.name] = None
    all_vars: dict[str, Any] = {
        "ansible_connection": "ssh",
        "ansible_ssh_common_args": ssh_common_args(spec),
        "ansible_python_interpreter": "auto_silent",
        "gpuforge_cluster": spec.cluster.name,
    }
    if spec.ssh.user != "root":
        all_vars["ansible_become_method"] = "sudo"
    return {"all": {"hosts": hosts, "vars": unsafe(all_vars), "children": dict(sorted(children.items()))}}

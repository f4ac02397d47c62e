"""A cluster spec for a running lab: the base spec with the lab's addresses, keys and mirror.

``inventories/lab.yaml`` already matches the default lab (``gflab``, 10.213.0.0/24); this
fits the same spec to any lab (another name or subnet, more nodes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuforge.spec import hostlist

from .lab_record import LabState


def lab_spec_data(base: dict[str, Any], state: LabState, hosts: dict[str, str] | None = None) -> dict[str, Any]:
    """``base`` (a parsed spec) pointed at ``state``'s nodes.

    ``hosts`` optionally replaces node groups' host lists (group name -> hostlist), e.g. to
    grow the workers onto a fourth node.
    """
    data = yaml.safe_load(yaml.safe_dump(base))  # deep copy of plain data
    data.setdefault("ssh", {})
    data["ssh"]["key"] = state.ssh_key
    data["ssh"]["known_hosts"] = state.known_hosts
    data.setdefault("sources", {})
    data["sources"]["mode"] = "mirror"
    data["sources"]["apt_proxy"] = state.mirror_url
    addresses = {n.name: n.address for n in state.nodes}
    members: list[tuple[dict[str, Any], list[str]]] = []
    for group in data.get("node_groups", []):
        if hosts and group.get("name") in hosts:
            group["hosts"] = hosts[group["name"]]
        names = hostlist.expand(group["hosts"])
        missing = [n for n in names if n not in addresses]
        if missing:
            raise ValueError(
                f"node group {group.get('name')!r} names {hostlist.compress(missing)}, "
                f"which lab {state.name} does not have (nodes: {', '.join(addresses)})"
            )
        group.pop("address_start", None)
        group["addresses"] = [addresses[n] for n in names]
        members.append((group, names))
    _fit_releases(data, {n.name: n.os for n in state.nodes}, members)
    return data


def _fit_releases(data: dict[str, Any], os_of: dict[str, str], members: list[tuple[dict[str, Any], list[str]]]) -> None:
    """The spec's ``os`` follows the nodes' releases: ``cluster.os`` when they run one, else each group's
    (a group whose nodes run different releases cannot be fitted: ValueError naming it)."""
    used = {os_of[n] for _, names in members for n in names}
    if not used:
        return
    if len(used) == 1:
        data.setdefault("cluster", {})["os"] = used.pop()
        for group, _ in members:
            group.pop("os", None)
        return
    for group, names in members:
        releases = sorted({os_of[n] for n in names})
        if len(releases) > 1:
            raise ValueError(
                f"node group {group.get('name')!r} has nodes on {' and '.join(releases)} "
                f"({', '.join(f'{n}={os_of[n]}' for n in names)}): split it into one group per release"
            )
        group["os"] = releases[0]


def write_lab_spec(
    base_path: str | Path, state: LabState, out: str | Path, hosts: dict[str, str] | None = None
) -> Path:
    """Write the lab-fitted spec to ``out``."""
    base = yaml.safe_load(Path(base_path).read_text())
    data = lab_spec_data(base, state, hosts)
    path = Path(out)
    path.write_text(
        f"# {Path(base_path).name} fitted to lab {state.name} by gpuforge\n" + yaml.safe_dump(data, sort_keys=False)
    )
    return path

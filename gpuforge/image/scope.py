"""Which nodes an image is for and what they have in common (pure: spec in, sets out).

Invariants: the common set is computed from the real spec with redacted secrets, so a file that
holds a secret (or differs between nodes of the group: ``/etc/hosts`` names the node) is never in
it; the build spec differs from the real one only in where packages come from and how the build
container is reached (:func:`build_spec_data`), so the files that depend on that (the apt proxy)
fall out of the common set too.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuforge.deploy.image_mode import common_files
from gpuforge.lab.plan import LAB_RELEASES
from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node, resolve_nodes

#: The base OSes the image build supports: the lab's releases (``gpuforge.lab.rootfs``), one per image.
SUPPORTED_OS = tuple(LAB_RELEASES)


__all__ = ["ImageSpecError", "build_spec_data", "common_files", "group_nodes"]


class ImageSpecError(ValueError):
    """A spec/group the image build cannot use; ``field`` names the option or spec field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def group_nodes(spec: Spec, group: str) -> list[Node]:
    """The nodes of node group ``group`` (raises :class:`ImageSpecError` naming ``--group``)."""
    names = [g.name for g in spec.node_groups]
    if group not in names:
        raise ImageSpecError("--group", f"no node group {group!r} in the spec (groups: {', '.join(names)})")
    nodes = [n for n in resolve_nodes(spec) if n.group == group]
    os_names = sorted({n.os.value for n in nodes})
    if any(o not in SUPPORTED_OS for o in os_names):
        raise ImageSpecError(
            f"node_groups[{group}].os",
            f"{', '.join(os_names)}: images are built from the lab's base ({', '.join(SUPPORTED_OS)}) only",
        )
    return nodes


def build_spec_data(base: dict[str, Any], key: str, known_hosts: str, proxy: str) -> dict[str, Any]:
    """The parsed spec ``base`` as the build runs it: the build container's key and known_hosts,
    reached over plain SSH (a group's ``connector: vagrant`` names the real nodes, not the build
    container), packages through the build's mirror (``proxy``); nothing else changes."""
    data = copy.deepcopy(base)
    for group in data.get("node_groups") or []:
        if isinstance(group, dict) and "connector" in group:
            group["connector"] = "ssh"
    data.setdefault("ssh", {})
    data["ssh"].update(key=key, known_hosts=known_hosts, user="root")
    data["ssh"].pop("sudo", None)
    data.setdefault("sources", {})
    data["sources"]["apt_proxy"] = proxy
    if data["sources"].get("mode", "upstream") == "upstream":
        data["sources"]["mode"] = "mirror"
    return data

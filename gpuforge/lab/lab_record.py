"""Where a lab keeps its files, and :class:`LabState`, saved as ``lab.json`` in its state dir.

State dir ``/var/lib/gpuforge/lab/<name>/``::

    lab.json                 LabState (below)
    id_ed25519, .pub         client key, authorized for root on every node
    known_hosts              every node by name and address with its host key
    console/<node>.log       each node's console (systemd-nspawn output), kept for debugging
    nodes/<node>/            rootfs (overlayfs upper/work + merged ``rootfs``, or a full copy)
    mirror/                  apt-cacher-ng config and logs (its cache: /var/cache/gpuforge/acng/<name>)
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

STATE_ROOT = "/var/lib/gpuforge/lab"
ACNG_CACHE_ROOT = "/var/cache/gpuforge/acng"


@dataclass(frozen=True)
class LabPaths:
    """All paths of lab ``name``."""

    name: str
    root: str = STATE_ROOT

    @property
    def dir(self) -> str:
        return os.path.join(self.root, self.name)

    @property
    def state_file(self) -> str:
        return os.path.join(self.dir, "lab.json")

    @property
    def lock(self) -> str:
        return os.path.join(self.root, f".{self.name}.lock")

    @property
    def key(self) -> str:
        return os.path.join(self.dir, "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return os.path.join(self.dir, "known_hosts")

    @property
    def console_dir(self) -> str:
        return os.path.join(self.dir, "console")

    def console(self, node: str) -> str:
        return os.path.join(self.console_dir, f"{node}.log")

    @property
    def nodes_dir(self) -> str:
        return os.path.join(self.dir, "nodes")

    def node_dir(self, node: str) -> str:
        return os.path.join(self.nodes_dir, node)

    def node_rootfs(self, node: str) -> str:
        return os.path.join(self.node_dir(node), "rootfs")

    @property
    def mirror_dir(self) -> str:
        return os.path.join(self.dir, "mirror")

    @property
    def mirror_cache(self) -> str:
        return os.path.join(ACNG_CACHE_ROOT, self.name)


@dataclass
class NodeState:
    """A node's name and address."""

    name: str
    address: str


@dataclass
class LabState:
    """What a running lab looks like to its users (``gpuforge lab status --json``)."""

    name: str
    subnet: str
    bridge: str
    bridge_address: str
    nodes: list[NodeState] = field(default_factory=list)
    ssh_key: str = ""
    known_hosts: str = ""
    mirror_url: str = ""
    state_dir: str = ""
    rootfs_mode: str = ""

    def node(self, name: str) -> NodeState:
        """The node called ``name``; KeyError if the lab has none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"lab {self.name} has no node {name!r} (nodes: {', '.join(n.name for n in self.nodes)})")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> LabState:
        d = dict(data)
        raw_nodes = d.pop("nodes", [])
        nodes = [NodeState(**n) for n in raw_nodes] if isinstance(raw_nodes, list) else []
        known = {f for f in cls.__dataclass_fields__ if f != "nodes"}
        return cls(nodes=nodes, **{k: v for k, v in d.items() if k in known})  # type: ignore[arg-type]


def save_state(state: LabState, path: str) -> None:
    """Write ``state`` as JSON to ``path`` atomically."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state.to_dict(), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def load_state(path: str) -> LabState | None:
    """Read a saved :class:`LabState`, or ``None`` if there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            return LabState.from_dict(json.load(f))
    except FileNotFoundError:
        return None

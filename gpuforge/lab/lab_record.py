"""Where a lab keeps its files, and :class:`LabState`, saved as ``lab.json`` in its state dir.

State dir ``/var/lib/gpuforge/lab/<name>/``::

    lab.json                 LabState (below)
    id_ed25519, .pub         client key, authorized for root on every node
    known_hosts              every node by name and address with its host key
    console/<node>.log       each node's console (systemd-nspawn output), kept for debugging
    nodes/<node>/            rootfs (overlayfs upper/work + merged ``rootfs``, or a full copy)
    mirror/                  apt-cacher-ng config and logs (its cache: /var/cache/gpuforge/acng/<name>)
    shared/<folder>/         host folders bind-mounted into some nodes: the lab's stand-in for shared
                             storage (:class:`SharedFolder`); removed with the lab
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

    def shared_dir(self, folder: str) -> str:
        return os.path.join(self.dir, "shared", folder)


@dataclass(frozen=True)
class SharedFolder:
    """The lab's stand-in for shared storage (the NFS or parallel filesystem a real cluster's nodes
    mount; the container lab's kernel serves no NFS): one host folder, ``shared/<name>`` in the
    lab's state dir, bind-mounted (``systemd-nspawn --bind``) at ``path`` into each of ``nodes``, so
    a file one of them writes there is the file the others read. It goes with the lab (``down``)."""

    name: str
    path: str
    nodes: tuple[str, ...]


@dataclass
class NodeState:
    """A node's name, address and release (``plan.LAB_RELEASES``; a lab saved before releases: Debian 12)."""

    name: str
    address: str
    os: str = "debian12"


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
    shared: list[SharedFolder] = field(default_factory=list)

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
        raw_shared = d.pop("shared", [])  # a lab saved before shared folders has none
        shared = [
            SharedFolder(f["name"], f["path"], tuple(f["nodes"])) for f in raw_shared if isinstance(f, dict)
        ] if isinstance(raw_shared, list) else []  # fmt: skip
        known = {f for f in cls.__dataclass_fields__ if f not in ("nodes", "shared")}
        return cls(nodes=nodes, shared=shared, **{k: v for k, v in d.items() if k in known})  # type: ignore[arg-type]


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

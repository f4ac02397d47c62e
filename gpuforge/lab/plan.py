"""Fixed, documented naming and addressing of a lab (pure functions, no side effects).

For a lab called ``NAME`` on subnet ``S`` (default ``10.213.0.0/24``) with ``N`` nodes:

* nodes are ``node1`` .. ``nodeN``; node *i* has address ``S + 10 + i`` (node1 = 10.213.0.11);
* the host bridge is ``gf-NAME`` and holds ``S + 1`` (10.213.0.1), which also serves the site
  package mirror (apt-cacher-ng) on port 3142;
* node *i* lives in network namespace ``gf-NAME-nodeI``, joined to the bridge by a veth pair
  whose host end is ``gvXXXXXXnI`` (``XXXXXX`` = first 6 hex digits of sha1(NAME); Linux limits
  interface names to 15 characters) and whose other end is ``eth0`` inside the namespace;
* the systemd-nspawn machine name is ``gf-NAME-nodeI``;
* MAC addresses are fixed too (:func:`mac_address`), so restarting a node keeps ARP caches valid.

Everything a lab creates can be found again from its name alone (see :func:`owned_netns`,
:func:`owned_links`), so ``down`` also cleans up after a crashed ``up``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_NAME = "gflab"
DEFAULT_SUBNET = "10.213.0.0/24"
DEFAULT_NODES = 3
MIRROR_PORT = 3142
NODE_OFFSET = 10
IFNAMSIZ = 15
MAX_NAME_LEN = IFNAMSIZ - len("gf-")

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_NODE_RE = re.compile(r"^node([1-9][0-9]*)$")


class PlanError(ValueError):
    """A lab name, subnet or node count that cannot be used."""


def validate_name(name: str) -> str:
    """Return ``name`` if it is a usable lab name (lowercase, <= 12 chars), else raise."""
    if not _NAME_RE.match(name) or len(name) > MAX_NAME_LEN or name.endswith("-"):
        raise PlanError(
            f"invalid lab name {name!r}: use lowercase letters, digits and '-', start with a letter, "
            f"at most {MAX_NAME_LEN} characters (the bridge is named gf-<name>, max {IFNAMSIZ} chars)"
        )
    return name


def parse_subnet(subnet: str, nodes: int = 1) -> ipaddress.IPv4Network:
    """Parse a private IPv4 subnet large enough for the bridge and ``nodes`` nodes."""
    try:
        net = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as exc:
        raise PlanError(f"invalid subnet {subnet!r}: {exc}") from exc
    if not net.is_private:
        raise PlanError(f"subnet {subnet} is not a private range; the lab only uses private addresses")
    if nodes < 1:
        raise PlanError("a lab needs at least one node")
    if NODE_OFFSET + nodes >= net.num_addresses - 1:
        raise PlanError(f"subnet {subnet} is too small for {nodes} nodes (node i gets .{NODE_OFFSET}+i)")
    return net


def bridge_address(subnet: str) -> str:
    """The bridge (and mirror) address: the subnet's first host address (``.1``)."""
    return str(parse_subnet(subnet).network_address + 1)


def node_name(index: int) -> str:
    """``node<index>`` (1-based)."""
    if index < 1:
        raise PlanError("node indexes start at 1")
    return f"node{index}"


def node_index(node: str) -> int:
    """Inverse of :func:`node_name`."""
    m = _NODE_RE.match(node)
    if not m:
        raise PlanError(f"invalid node name {node!r}: nodes are named node1..nodeN")
    return int(m.group(1))


def node_address(subnet: str, index: int) -> str:
    """Address of node ``index``: subnet base + 10 + index (node1 = .11)."""
    net = parse_subnet(subnet, index)
    return str(net.network_address + NODE_OFFSET + index)


def name_hash(name: str) -> str:
    """Short stable hash of a lab name, used where interface names must stay short."""
    return hashlib.sha1(name.encode()).hexdigest()[:6]


def bridge_name(name: str) -> str:
    """Host bridge name ``gf-<name>`` (<= 15 characters)."""
    return f"gf-{validate_name(name)}"


def netns_name(name: str, node: str) -> str:
    """Network namespace (and nspawn machine name) of a node: ``gf-<name>-<node>``."""
    return f"gf-{validate_name(name)}-{node}"


def machine_name(name: str, node: str) -> str:
    """systemd-nspawn machine name of a node (same as its namespace name)."""
    return netns_name(name, node)


def veth_host(name: str, node: str) -> str:
    """Host end of a node's veth pair: ``gv<hash6>n<i>``."""
    return f"gv{name_hash(name)}n{node_index(node)}"


def mac_address(name: str, role: int, index: int = 0) -> str:
    """Fixed, locally administered MAC: role 0 = a node's eth0, 1 = its veth host end, 2 = bridge.

    Fixed MACs keep neighbour (ARP) caches valid when a node is restarted with a new veth pair;
    with random ones a repaired node stays unreachable until stale entries expire (~30 s).
    """
    h = name_hash(name)
    return f"02:{h[0:2]}:{h[2:4]}:{h[4:6]}:{role:02x}:{index:02x}"


def owned_netns(name: str, namespaces: Iterable[str]) -> list[str]:
    """Namespaces (from ``ip netns list``) that belong to lab ``name``."""
    pat = re.compile(rf"^gf-{re.escape(name)}-node[1-9][0-9]*$")
    return sorted(ns for ns in namespaces if pat.match(ns))


def owned_links(name: str, links: Iterable[str]) -> list[str]:
    """Host interfaces (from ``ip link``) that belong to lab ``name``: its bridge and veth ends."""
    h = name_hash(name)
    pat = re.compile(rf"^(gf-{re.escape(name)}|gv{h}n[1-9][0-9]*)$")
    return sorted(link for link in links if pat.match(link))


def machine_node(name: str, machine: str) -> str | None:
    """The node a machine name belongs to in lab ``name``, or ``None`` if it is not this lab's."""
    m = re.match(rf"^gf-{re.escape(name)}-(node[1-9][0-9]*)$", machine)
    return m.group(1) if m else None


@dataclass(frozen=True)
class NodePlan:
    """Name and address of one node."""

    name: str
    address: str


def node_plan(subnet: str, nodes: int) -> list[NodePlan]:
    """The nodes of a lab with ``nodes`` nodes, in order."""
    parse_subnet(subnet, nodes)
    return [NodePlan(node_name(i), node_address(subnet, i)) for i in range(1, nodes + 1)]


#: The releases a lab node can run (the spec's ``os`` name -> the Debian suite its rootfs is built from,
#: through the site mirror); ``tests/lab/test_lab_units.py`` keeps them equal to the platform table's codenames.
LAB_RELEASES: dict[str, str] = {"debian12": "bookworm", "debian13": "trixie"}
DEFAULT_OS = "debian12"


def parse_releases(values: Iterable[str], nodes: int) -> tuple[str | None, dict[str, str]]:
    """``--os`` values: ``debian13`` (every node) or ``node3=debian12`` (one node; a later value wins).

    Returns (the release for every node not named, or None: keep each node's), node -> release."""
    every: str | None = None
    named: dict[str, str] = {}
    for text in values:
        node, _, release = text.rpartition("=")
        if release not in LAB_RELEASES:
            raise PlanError(f"--os {text!r}: the lab runs {', '.join(LAB_RELEASES)} (give one, or NODE=RELEASE)")
        if not node:
            every, named = release, {}
            continue
        if _NODE_RE.match(node) is None or node_index(node) > nodes:
            raise PlanError(f"--os {text!r}: the lab has node1..node{nodes}")
        named[node] = release
    return every, named


def hosts_file(nodes: Iterable[NodePlan]) -> str:
    """``/etc/hosts`` of every node: localhost plus all nodes (each node's own name included)."""
    lines = [
        "# Written by gpuforge lab; every lab node is listed here (there is no DNS inside the lab).",
        "127.0.0.1\tlocalhost",
        "::1\t\tlocalhost ip6-localhost ip6-loopback",
        "ff02::1\t\tip6-allnodes",
        "ff02::2\t\tip6-allrouters",
    ]
    lines += [f"{n.address}\t{n.name}" for n in nodes]
    return "\n".join(lines) + "\n"


def known_hosts(entries: Iterable[tuple[NodePlan, str]]) -> str:
    """known_hosts text: one line per node listing its name and address with its host key."""
    return "".join(f"{n.name},{n.address} {' '.join(key.split()[:2])}\n" for n, key in entries)


_SHARED_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
#: A path inside a node: absolute, plain segments (no ``:``, ``\``, ``,`` or space: systemd-nspawn's
#: ``--bind=SOURCE:DEST:OPTIONS`` splits on ``:`` and interprets backslash escapes).
_SHARED_PATH_RE = re.compile(r"^(/[A-Za-z0-9._-]+)+$")


def check_shared(folders: Iterable[tuple[str, str, Iterable[str]]], nodes: int) -> None:
    """Shared folders (name, path in the nodes, nodes) of a lab of ``nodes`` nodes: a unique short
    name each, a plain absolute path other than a system directory, and nodes the lab has."""
    seen: set[str] = set()
    for name, path, members in folders:
        if not _SHARED_NAME_RE.match(name) or name in seen:
            raise PlanError(f"shared folder {name!r}: give each a unique name (lowercase letters, digits, '-')")
        seen.add(name)
        parts = path.split("/")
        if not _SHARED_PATH_RE.match(path) or {".", ".."} & set(parts) or parts[1] in _SYSTEM_DIRS:
            raise PlanError(f"shared folder {name}: {path!r} is no plain absolute path outside the system's folders")
        for member in members:
            if not 1 <= node_index(member) <= nodes:
                raise PlanError(f"shared folder {name}: the lab has no {member} (node1..node{nodes})")


#: Top-level folders a shared folder may not cover (the OS the node boots from).
_SYSTEM_DIRS = frozenset({"bin", "boot", "dev", "etc", "lib", "lib64", "proc", "root", "run", "sbin", "sys", "usr"})

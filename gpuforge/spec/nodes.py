"""The spec's node groups resolved into individual nodes."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gpuforge.spec import hostlist
from gpuforge.spec.errors import SpecError, SpecIssue
from gpuforge.spec.gpus import GPU_MODELS, GpuModel
from gpuforge.spec.model import Connector, Hardware, NodeGroup, OsFamily, Role, Spec
from gpuforge.spec.platforms import Arch, Platform, platform_for
from gpuforge.spec.types import DEFAULT_NODE_PREFIX


@dataclass(frozen=True)
class Node:
    """One node with everything the renderers and deploys need."""

    name: str
    address: str | None
    group: str
    roles: frozenset[Role]
    hardware: Hardware
    os: OsFamily
    arch: Arch
    leaf_switch: str | None
    mig_config: str | None
    connector: Connector

    @property
    def ssh_target(self) -> str:
        return self.address or self.name

    @property
    def gpu_model(self) -> GpuModel | None:
        return GPU_MODELS[self.hardware.gpu.model] if self.hardware.gpu else None

    @property
    def platform(self) -> Platform:
        """This node's row of the platform table (``UnsupportedPlatform``: ``check`` refuses such a spec)."""
        return platform_for(self.os, self.arch)

    def has(self, role: Role) -> bool:
        return role in self.roles


def group_addresses(group: NodeGroup) -> list[str | None]:
    """Addresses of a group's hosts in order (None where the name is the address)."""
    return expand_addresses(len(group.hostnames), group.addresses, group.address_start)


def expand_addresses(count: int, addresses: list[str] | None, address_start: str | None) -> list[str | None]:
    """``count`` addresses from an explicit list or a first address (None where none is given);
    the nodes' addresses and their BMCs' share this form."""
    if addresses is not None:
        return list(addresses) + [None] * max(0, count - len(addresses))
    if address_start is not None:
        start = ipaddress.IPv4Address(address_start.partition("/")[0])
        return [str(start + i) if int(start) + i < 2**32 else None for i in range(count)]
    return [None] * count


def address_range_problem(start: str | None, count: int) -> str | None:
    """Why ``count`` addresses from ``start`` (``A.B.C.D`` or ``A.B.C.D/prefix``; no prefix: a /24)
    leave the node network or take its network or broadcast address; None when they fit."""
    if start is None or count == 0:
        return None
    address, _, prefix = start.partition("/")
    net = ipaddress.IPv4Interface(f"{address}/{prefix or DEFAULT_NODE_PREFIX}").network
    first = ipaddress.IPv4Address(address)
    hosts = (net.network_address + 1, net.broadcast_address - 1)
    if hosts[0] <= first and int(first) + count - 1 <= int(hosts[1]):
        return None
    last = ipaddress.IPv4Address(min(int(first) + count - 1, 2**32 - 1))
    problem = f"{count} host(s) from {first} to {last} do not fit the host addresses of {net}"
    problem += f" ({hosts[0]} to {hosts[1]})"
    if prefix:
        return problem
    return f"{problem}; a node network larger than a /{DEFAULT_NODE_PREFIX}: give its prefix ({address}/22, say)"


def group_leaf_switches(group: NodeGroup) -> dict[str, str | None]:
    """Leaf switch of each host of a group."""
    if isinstance(group.leaf_switch, dict):
        out: dict[str, str | None] = dict.fromkeys(group.hostnames)
        for switch, expr in group.leaf_switch.items():
            for name in hostlist.expand(expr):
                if name in out:
                    out[name] = switch
        return out
    return dict.fromkeys(group.hostnames, group.leaf_switch)


_RESOLVED: dict[int, tuple[Spec, list[Node]]] = {}


def resolve_nodes(spec: Spec) -> list[Node]:
    """All nodes of the spec in declaration order (computed once per spec object)."""
    hit = _RESOLVED.get(id(spec))
    if hit is not None and hit[0] is spec:
        return list(hit[1])
    nodes = _resolve(spec)
    if len(_RESOLVED) > 64:
        _RESOLVED.clear()
    _RESOLVED[id(spec)] = (spec, nodes)
    return list(nodes)


def _resolve(spec: Spec) -> list[Node]:
    nodes: list[Node] = []
    for group in spec.node_groups:
        leaves = group_leaf_switches(group)
        for name, address in zip(group.hostnames, group_addresses(group), strict=True):
            nodes.append(
                Node(
                    name=name,
                    address=address,
                    group=group.name,
                    roles=frozenset(group.roles),
                    hardware=group.hardware,
                    os=group.os or spec.cluster.os,
                    arch=group.arch,
                    leaf_switch=leaves[name],
                    mig_config=group.mig_config,
                    connector=group.connector,
                )
            )
    return nodes


def nodes_with(spec: Spec, role: Role) -> list[Node]:
    """Nodes that carry ``role``."""
    return [n for n in resolve_nodes(spec) if n.has(role)]


def targeted(node: Node, targets: list[str]) -> bool:
    """Whether ``targets`` (role or node-group names; none = every node) include ``node``."""
    return not targets or node.group in targets or any(r.value in targets for r in node.roles)


def select_nodes(spec: Spec, selector: str) -> list[str]:
    """Node names for a selector: comma-separated group names and/or hostlists."""
    groups = {g.name: g.hostnames for g in spec.node_groups}
    names: list[str] = []
    for part in hostlist.split_top_level(selector):
        for name in groups.get(part) or hostlist.expand(part):
            if name not in names:
                names.append(name)
    return names


#: ``--limit``'s help, the same for every command that takes it (they all parse it with :func:`select_limit`).
LIMIT_HELP = "Only these nodes: hostlists, node-group and role names, comma-separated; '!' before one leaves it out"


def select_limit(spec: Spec, selector: str) -> list[str]:
    """Node names for ``--limit``, in the spec's order.

    ``selector`` is comma-separated node-group names, role names and hostlists; a part led by
    ``!`` leaves its nodes out (Ansible's and pdsh's convention; only exclusions means "every node
    but"). Every part must name nodes of the spec, and the result must not be empty: otherwise a
    :class:`SpecError` on ``--limit`` names what is known, before anything connects.
    """
    nodes = resolve_nodes(spec)
    order = [n.name for n in nodes]
    known = set(order)
    groups = {g.name: g.hostnames for g in spec.node_groups}
    roles = {r.value: [n.name for n in nodes if n.has(r)] for r in Role}
    wanted: set[str] = set()
    dropped: set[str] = set()
    includes = False
    try:
        parts = hostlist.split_top_level(selector)
    except ValueError as exc:
        raise SpecError([SpecIssue(("--limit",), str(exc))]) from None
    for raw in parts:
        part = raw.strip()
        exclude = part.startswith("!")
        part = part[1:].strip() if exclude else part
        if not part:
            continue
        try:
            names = groups.get(part) or roles.get(part) or hostlist.expand(part)
        except ValueError as exc:
            raise SpecError([SpecIssue(("--limit",), str(exc))]) from None
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SpecError([SpecIssue(("--limit",), f"{part!r} matches no node of the spec; {_known(spec)}")])
        (dropped if exclude else wanted).update(names)
        includes = includes or not exclude
    chosen = [n for n in order if (n in wanted or not includes) and n not in dropped]
    if not chosen:
        raise SpecError([SpecIssue(("--limit",), f"{selector!r} leaves no node; {_known(spec)}")])
    return chosen


def _known(spec: Spec) -> str:
    nodes = resolve_nodes(spec)
    roles = sorted({r.value for n in nodes for r in n.roles})
    return (
        f"node groups: {', '.join(g.name for g in spec.node_groups)}; roles: {', '.join(roles)}; "
        f"nodes: {hostlist.compress([n.name for n in nodes])}"
    )

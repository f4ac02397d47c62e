"""Host bridge, per-node network namespaces and veth pairs (no NAT, no forwarding).

Nodes can reach each other and the bridge address (where the site mirror listens), nothing else:
the lab never enables IP forwarding nor adds NAT rules.
"""

from __future__ import annotations

import ipaddress
import json
import os

from . import plan
from .system import LabError, run


def netns_list() -> list[str]:
    """Names of all network namespaces (``ip netns list``)."""
    out = run(["ip", "netns", "list"], check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    if os.path.isdir("/run/netns"):  # also half-made ones ip does not list
        names += os.listdir("/run/netns")
    return sorted(set(names))


def link_list() -> list[str]:
    """Names of all host interfaces."""
    out = run(["ip", "-j", "link", "show"]).stdout
    return [link["ifname"] for link in json.loads(out or "[]")]


def link_exists(name: str) -> bool:
    return run(["ip", "link", "show", "dev", name], check=False).returncode == 0


def _overlapping_route(subnet: str, bridge: str) -> str | None:
    net = ipaddress.IPv4Network(subnet)
    out = run(["ip", "-j", "-4", "route", "show"], check=False).stdout
    for r in json.loads(out or "[]"):
        dst = r.get("dst", "")
        if dst in ("", "default") or r.get("dev") == bridge:
            continue
        try:
            other = ipaddress.IPv4Network(dst, strict=False)
        except ValueError:
            continue
        if other.overlaps(net):
            return f"{dst} dev {r.get('dev')}"
    return None


def bridge_ok(name: str, subnet: str) -> bool:
    """True if the lab bridge exists, is up and holds the bridge address."""
    br = plan.bridge_name(name)
    out = run(["ip", "-j", "addr", "show", "dev", br], check=False)
    if out.returncode != 0:
        return False
    info = json.loads(out.stdout or "[]")
    want = plan.bridge_address(subnet)
    return (
        bool(info)
        and "UP" in info[0].get("flags", [])
        and any(a.get("local") == want for a in info[0].get("addr_info", []))
    )


def create_bridge(name: str, subnet: str) -> None:
    """(Re)create bridge ``gf-<name>`` with the subnet's .1 address."""
    br = plan.bridge_name(name)
    if link_exists(br):
        run(["ip", "link", "del", br])
    clash = _overlapping_route(subnet, br)
    if clash:
        raise LabError(f"subnet {subnet} overlaps an existing route ({clash}); pick another with --subnet")
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    run(
        [
            "ip",
            "link",
            "add",
            br,
            "address",
            plan.mac_address(name, 2),
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ]
    )
    run(["ip", "addr", "add", f"{plan.bridge_address(subnet)}/{prefix}", "dev", br])
    run(["ip", "link", "set", br, "up"])


def node_net_ok(name: str, node: str) -> bool:
    """True if the node's namespace exists and its veth host end is up in the bridge."""
    ns, vh = plan.netns_name(name, node), plan.veth_host(name, node)
    if ns not in netns_list():
        return False
    out = run(["ip", "-j", "link", "show", "dev", vh], check=False)
    if out.returncode != 0:
        return False
    info = json.loads(out.stdout or "[]")
    return bool(info) and info[0].get("master") == plan.bridge_name(name)


def create_node_net(name: str, subnet: str, node: str, fresh: bool = False) -> str:
    """(Re)create the node's namespace and veth; return the namespace path for nspawn.

    ``fresh``: the caller saw neither the namespace nor the veth, so nothing is removed first.
    Two ``ip -batch`` runs (the host side, then inside the namespace) instead of one process
    per step: a 48-node lab makes them all at once.
    """
    if not fresh:
        remove_node_net(name, node)
    ns, vh = plan.netns_name(name, node), plan.veth_host(name, node)
    prefix = ipaddress.IPv4Network(subnet).prefixlen
    addr = plan.node_address(subnet, plan.node_index(node))
    i = plan.node_index(node)
    host_side = [
        f"netns add {ns}",
        f"link add {vh} address {plan.mac_address(name, 1, i)} type veth"
        f" peer name eth0 address {plan.mac_address(name, 0, i)} netns {ns}",
        f"link set {vh} master {plan.bridge_name(name)}",
        f"link set {vh} up",
    ]
    inside = [
        "link set lo up",
        f"addr add {addr}/{prefix} dev eth0",
        "link set eth0 up",
        f"route add default via {plan.bridge_address(subnet)}",
    ]
    run(["ip", "-batch", "-"], stdin="\n".join(host_side) + "\n")
    run(["ip", "-n", ns, "-batch", "-"], stdin="\n".join(inside) + "\n")
    return f"/run/netns/{ns}"


def remove_node_net(name: str, node: str) -> None:
    """Delete the node's namespace and veth if they exist."""
    ns, vh = plan.netns_name(name, node), plan.veth_host(name, node)
    if ns in netns_list():
        run(["ip", "netns", "del", ns], check=False)
        if os.path.exists(f"/run/netns/{ns}"):
            os.unlink(f"/run/netns/{ns}")
    if link_exists(vh):
        run(["ip", "link", "del", vh], check=False)


def remove_all(name: str) -> list[str]:
    """Delete every namespace, veth and bridge of lab ``name`` found by name; return what went."""
    gone: list[str] = []
    for ns in plan.owned_netns(name, netns_list()):
        run(["ip", "netns", "del", ns], check=False)
        if os.path.exists(f"/run/netns/{ns}"):
            os.unlink(f"/run/netns/{ns}")
        gone.append(f"netns {ns}")
    for link in plan.owned_links(name, link_list()):
        if link_exists(link):
            run(["ip", "link", "del", link], check=False)
            gone.append(f"link {link}")
    return gone

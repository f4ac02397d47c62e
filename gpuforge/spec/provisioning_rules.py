"""What the ``provisioning`` section and the groups' ``boot`` sections must say together.

* a group's ``boot`` needs the top-level ``provisioning`` section (the server it boots from);
* ``mode: dhcp`` may give a ``range`` inside the server's network; ``mode: proxy`` gives none (the site's
  DHCP server hands out addresses); the server's own address is in no range;
* ``boot.macs`` names every node of its group and no other; no MAC is two nodes';
* a booting node has an IPv4 address inside the server's network (the network it boots in), not the
  server's; no node of the spec has an address inside the range;
* ``stateless`` needs ``nfs_export`` and takes no ``root``; ``disk`` needs ``root`` and takes no
  ``nfs_export``.

Invariant: :func:`provisioning_rules` yields nothing for a spec with neither section.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import NodeGroup, Spec
from gpuforge.spec.nodes import group_addresses
from gpuforge.spec.provisioning import BootMode, DhcpMode, NodeBoot, ProvisioningServer

_SERVER = ("provisioning", "server")
#: The field each boot mode needs, and the one it refuses.
_MODE_FIELDS: dict[BootMode, tuple[str, str]] = {
    BootMode.STATELESS: ("nfs_export", "root"),
    BootMode.DISK: ("root", "nfs_export"),
}


def _range_issues(server: ProvisioningServer) -> Iterator[SpecIssue]:
    net = ipaddress.IPv4Interface(server.address).network
    rng = server.range
    if server.mode is DhcpMode.PROXY:
        if rng is not None:
            yield SpecIssue(
                (*_SERVER, "range"), "mode proxy hands out no addresses (the site's DHCP server does): remove range"
            )
        return
    if rng is None:
        return
    hosts = (net.network_address + 1, net.broadcast_address - 1)
    for end in ("start", "end"):
        address = ipaddress.IPv4Address(getattr(rng, end))
        if not hosts[0] <= address <= hosts[1]:
            yield SpecIssue(
                (*_SERVER, "range", end),
                f"{address} is not a host address of the boot network {net} ({hosts[0]} to {hosts[1]})",
            )
    if _in_range(server, server.address.partition("/")[0]):
        yield SpecIssue((*_SERVER, "range"), f"the range holds the server's own address {server.address}")


def _in_range(server: ProvisioningServer, address: str) -> bool:
    rng = server.range
    if rng is None or server.mode is DhcpMode.PROXY:
        return False
    ip = ipaddress.IPv4Address(address)
    return ipaddress.IPv4Address(rng.start) <= ip <= ipaddress.IPv4Address(rng.end)


def _mode_issues(at: tuple[str | int, ...], boot: NodeBoot) -> Iterator[SpecIssue]:
    needed, refused = _MODE_FIELDS[boot.mode]
    if getattr(boot, needed) is None:
        yield SpecIssue((*at, needed), f"required for mode {boot.mode.value}")
    if getattr(boot, refused) is not None:
        yield SpecIssue((*at, refused), f"means nothing to mode {boot.mode.value}: remove it")


def _mac_issues(at: tuple[str | int, ...], group: NodeGroup, boot: NodeBoot) -> Iterator[SpecIssue]:
    hosts = group.hostnames
    for name in hosts:
        if name not in boot.macs:
            yield SpecIssue((*at, "macs"), "no boot MAC: every node of the group needs one", node=name)
    for name in boot.macs:
        if name not in hosts:
            yield SpecIssue((*at, "macs"), f"{name} is not a node of group {group.name} ({group.hosts})")


def _address_issues(
    at: tuple[str | int, ...], server: ProvisioningServer, name: str, address: str | None
) -> Iterator[SpecIssue]:
    iface = ipaddress.IPv4Interface(server.address)
    try:
        ip = ipaddress.IPv4Address(address or "")
    except ValueError:
        yield SpecIssue(at, "a network-booted node needs an IPv4 address (address_start or addresses)", node=name)
        return
    if ip not in iface.network or ip in (iface.network.network_address, iface.network.broadcast_address):
        yield SpecIssue(at, f"address {ip} is outside the boot network {iface.network}", node=name)
    elif ip == iface.ip:
        yield SpecIssue(at, f"address {ip} is the provisioning server's own", node=name)


def _range_overlaps(spec: Spec, server: ProvisioningServer) -> Iterator[SpecIssue]:
    """A node of the spec (network-booted or not) whose address the range would hand to another machine."""
    rng = server.range
    if rng is None or server.mode is DhcpMode.PROXY:
        return
    for group in spec.node_groups:
        for name, address in zip(group.hostnames, group_addresses(group), strict=True):
            try:
                inside = address is not None and _in_range(server, address)
            except ValueError:  # an IPv6 address: in no IPv4 range
                continue
            if inside:
                yield SpecIssue(
                    (*_SERVER, "range"),
                    f"the range {rng.start}-{rng.end} holds node {name}'s address {address}: "
                    "keep the nodes' addresses out of it",
                    node=name,
                )


def _group_issues(gi: int, group: NodeGroup, boot: NodeBoot, server: ProvisioningServer) -> Iterator[SpecIssue]:
    at = ("node_groups", gi, "boot")
    yield from _mode_issues(at, boot)
    yield from _mac_issues(at, group, boot)
    field = "addresses" if group.addresses is not None else "address_start"
    for name, address in zip(group.hostnames, group_addresses(group), strict=True):
        yield from _address_issues(("node_groups", gi, field), server, name, address)


def provisioning_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Every problem of the ``provisioning`` and ``node_groups[].boot`` sections of ``spec``."""
    prov = spec.provisioning
    if prov is not None:
        yield from _range_issues(prov.server)
        yield from _range_overlaps(spec, prov.server)
    owner: dict[str, str] = {}
    for gi, group in enumerate(spec.node_groups):
        boot = group.boot
        if boot is None:
            continue
        if prov is None:
            yield SpecIssue(
                ("node_groups", gi, "boot"), "needs the provisioning section (the server the nodes boot from)"
            )
            continue
        yield from _group_issues(gi, group, boot, prov.server)
        for name, mac in boot.macs.items():
            first = owner.setdefault(mac, name)
            if first != name:
                yield SpecIssue(
                    ("node_groups", gi, "boot", "macs"),
                    f"MAC {mac} is also {first}'s: one boot NIC per node",
                    node=name,
                )

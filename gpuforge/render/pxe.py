"""The network boot's files: dnsmasq's configuration (DHCP or proxy-DHCP, TFTP, the iPXE chainload)
and each node's iPXE script. Pure functions of the spec.

The chain: a node's firmware PXE asks DHCP; dnsmasq answers (known MACs only) with the iPXE binary
of its firmware (option 93, a row of :data:`gpuforge.spec.pxe_facts.FIRMWARES`), served by its TFTP;
iPXE asks DHCP again with its user class ``iPXE``; dnsmasq answers with the HTTP URL of that node's
script, which loads the group's image kernel and initrd with the boot mode's kernel command line.

Invariants: only options of :data:`~gpuforge.spec.pxe_facts.DNSMASQ_OPTIONS` and commands of
:data:`~gpuforge.spec.pxe_facts.IPXE_COMMANDS` are written; every value comes from a spec type that
is one token in its place (see :mod:`gpuforge.spec.provisioning`); no credential is in any file;
output is sorted by spec order, so the same spec renders the same bytes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import group_addresses
from gpuforge.spec.provisioning import BootMode, DhcpMode, NodeBoot, ProvisioningServer
from gpuforge.spec.pxe_facts import FIRMWARES, IPXE_OPTION, IPXE_TAG, IPXE_USER_CLASS, KERNEL_ARGS, NODE_TAG_PREFIX

#: The names ``gpuforge image build`` gives the image's kernel and initrd (gpuforge.image.bootable).
KERNEL_FILE, INITRD_FILE = "vmlinuz", "initrd.img"
#: Where the rendered files go, relative to the render folder (the HTTP server serves ``http/``).
DNSMASQ_CONF = "dnsmasq.conf"
SCRIPT_DIR = "http/ipxe"


@dataclass(frozen=True)
class BootNode:
    """One network-booted node as the files name it."""

    name: str
    group: str
    mac: str
    address: str
    mode: BootMode
    image: str  # the group's image folder, as the spec gives it (relative to the spec's folder)


def boot_nodes(spec: Spec, names: list[str] | None = None) -> list[BootNode]:
    """The nodes with a boot MAC and an address (of ``names``; None: all), in spec order (the spec's
    rules refuse a booting node without either)."""
    out: list[BootNode] = []
    for group in spec.node_groups:
        boot = group.boot
        if boot is None:
            continue
        for name, address in zip(group.hostnames, group_addresses(group), strict=True):
            if name in boot.macs and address is not None and (names is None or name in names):
                out.append(BootNode(name, group.name, boot.macs[name], address, boot.mode, boot.image))
    return out


def server_ip(server: ProvisioningServer) -> str:
    return server.address.partition("/")[0]


def base_url(server: ProvisioningServer) -> str:
    """The HTTP server's root URL: the server's address and ``http_port``."""
    return f"http://{server_ip(server)}:{server.http_port}"


def script_url_path(node: str) -> str:
    """The URL path of the node's script on the HTTP server."""
    return f"/ipxe/{node}.ipxe"


def image_url_path(group: str, name: str) -> str:
    """The URL path of a file of the group's image folder on the HTTP server."""
    return f"/images/{group}/{name}"


def script_url(server: ProvisioningServer, node: str) -> str:
    return f"{base_url(server)}{script_url_path(node)}"


def script_path(node: str) -> str:
    """The node's script, relative to the render folder."""
    return f"{SCRIPT_DIR}/{node}.ipxe"


def _range_line(server: ProvisioningServer) -> str:
    net = ipaddress.IPv4Interface(server.address).network
    if server.mode is DhcpMode.PROXY:
        return f"dhcp-range={net.network_address},proxy,{net.netmask}"
    if server.range is None:
        return f"dhcp-range={net.network_address},static,{net.netmask}"
    return f"dhcp-range={server.range.start},{server.range.end},{net.netmask}"


def _host_line(server: ProvisioningServer, node: BootNode) -> str:
    """Proxy mode gives no address: the line only marks the MAC known and tags it as the node."""
    tag = f"set:{NODE_TAG_PREFIX}{node.name}"
    if server.mode is DhcpMode.PROXY:
        return f"dhcp-host={node.mac},{tag},{node.name}"
    return f"dhcp-host={node.mac},{tag},{node.address},{node.name}"


def _chainload_lines(server: ProvisioningServer) -> list[str]:
    """The firmware's iPXE binary, to known MACs whose client is not iPXE yet: ``dhcp-boot`` for DHCP,
    ``pxe-service`` for proxy-DHCP (dnsmasq's proxy mode answers from its PXE services)."""
    lines: list[str] = []
    for fw in FIRMWARES:
        if server.mode is DhcpMode.PROXY:
            lines.append(f'pxe-service=tag:known,tag:!{IPXE_TAG},{fw.pxe_csa},"{fw.name}",{fw.binary}')
        else:
            lines.append(f"dhcp-boot=tag:known,tag:{fw.tag},tag:!{IPXE_TAG},{fw.binary}")
    return lines


def dnsmasq_conf(spec: Spec, names: list[str] | None = None) -> str:
    """dnsmasq's whole configuration file for the spec's boot network (``--conf-file``), serving the
    nodes of ``names`` (None: every node with a ``boot`` section)."""
    prov = spec.provisioning
    if prov is None:
        raise ValueError("the spec has no provisioning section")
    server = prov.server
    nodes = boot_nodes(spec, names)
    lines = [
        f"# gpuforge provision: network boot of cluster {spec.cluster.name} (generated: do not edit)",
        "port=0",
        f"interface={server.interface}",
        "bind-interfaces",
        "log-dhcp",
        _range_line(server),
        *(_host_line(server, n) for n in nodes),
        *(f"dhcp-match=set:{fw.tag},option:client-arch,{arch}" for fw in FIRMWARES for arch in fw.client_arch),
        f"dhcp-userclass=set:{IPXE_TAG},{IPXE_USER_CLASS}",
        f"dhcp-match=set:{IPXE_TAG},{IPXE_OPTION}",
        "enable-tftp",
        f"tftp-root={server.tftp_root}",
        *_chainload_lines(server),
        *(f"dhcp-boot=tag:{IPXE_TAG},tag:{NODE_TAG_PREFIX}{n.name},{script_url(server, n.name)}" for n in nodes),
    ]
    return "\n".join(lines) + "\n"


def kernel_args(server: ProvisioningServer, boot: NodeBoot) -> list[str]:
    """The boot mode's kernel command line, its placeholders filled from the spec."""
    values = {"server": server_ip(server), "nfs_export": boot.nfs_export or "", "root": boot.root or ""}
    return [p.format(**values) for p in KERNEL_ARGS[boot.mode].params]


def ipxe_script(server: ProvisioningServer, group: str, boot: NodeBoot) -> str:
    """A node's iPXE script: the group image's kernel with the mode's command line, its initrd, boot."""
    base = base_url(server)
    return "\n".join(
        [
            "#!ipxe",
            " ".join([f"kernel {base}{image_url_path(group, KERNEL_FILE)}", *kernel_args(server, boot)]),
            f"initrd {base}{image_url_path(group, INITRD_FILE)}",
            "boot",
        ]
    ) + "\n"  # fmt: skip


def rendered_files(spec: Spec, names: list[str] | None = None) -> dict[str, str]:
    """Every file ``gpuforge provision --render`` writes for ``names`` (None: every booting node):
    path (relative to its folder) -> content."""
    prov = spec.provisioning
    if prov is None:
        return {}
    files = {DNSMASQ_CONF: dnsmasq_conf(spec, names)}
    boots = {g.name: g.boot for g in spec.node_groups if g.boot is not None}
    for node in boot_nodes(spec, names):
        files[script_path(node.name)] = ipxe_script(prov.server, node.group, boots[node.group])
    return files


@dataclass(frozen=True)
class Served:
    """A file the HTTP server serves: ``name`` inside the render folder (``image`` None) or inside
    group ``group``'s image folder ``image`` (as the spec gives it: relative to the spec's folder)."""

    name: str
    group: str | None = None
    image: str | None = None


def served_files(spec: Spec, names: list[str] | None = None) -> dict[str, Served]:
    """Every URL path the rendered files point the nodes of ``names`` (None: every booting node) to,
    and the file behind it: each node's script, and the kernel and initrd of each of their groups.

    Invariant: exactly the URLs of :func:`dnsmasq_conf`'s ``dhcp-boot`` lines and of the scripts'
    ``kernel`` and ``initrd`` lines; nothing else (no folder, no other file of an image folder)."""
    out: dict[str, Served] = {}
    boots = {g.name: g.boot for g in spec.node_groups if g.boot is not None}
    for node in boot_nodes(spec, names):
        out[script_url_path(node.name)] = Served(script_path(node.name))
        for name in (KERNEL_FILE, INITRD_FILE):
            out[image_url_path(node.group, name)] = Served(name, node.group, boots[node.group].image)
    return out

"""Network boot: the spec's ``provisioning`` section (the control host's DHCP/TFTP/HTTP service) and
each node group's ``boot`` (how its nodes boot the group's baked image, and each node's boot MAC).

Every value lands in a dnsmasq configuration line (``key=value``, values split at ``,``), an iPXE
script line (words split at spaces) or a kernel command line (parameters split at spaces). So each
type here accepts only characters that are one literal token in all three: no ``,``, space, ``#``,
quote, ``$`` (iPXE expands ``${...}``), ``..`` path step or line break; MACs are stored in one form,
lower case with ':' (what dnsmasq's ``dhcp-host`` and the test client write).

Invariants: the section changes nothing on running nodes (every field is ``live``); what the fields
must say together (addresses inside the server's network, one MAC per node, a range clear of the
nodes) is checked by :mod:`gpuforge.spec.provisioning_rules`.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, model_validator

from gpuforge.spec.policy import live
from gpuforge.spec.strict import StrictModel
from gpuforge.spec.types import LocalPath

_MAC = re.compile(r"[0-9a-f]{2}(?:[:-][0-9a-f]{2}){5}")
#: Linux interface names: fewer than IFNAMSIZ (16) bytes; no '/', ':', space (kept to a safe set).
_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
#: An absolute path of plain segments (no ',' dnsmasq splits at, no ':' nfsroot splits at), not ``/``
#: itself (a TFTP root or an NFS export of the whole control host).
_PLAIN_PATH = re.compile(r"(?:/[A-Za-z0-9_.+-]+)+")
_ROOT_DEVICE = re.compile(
    r"/dev/[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*|(?:UUID|PARTUUID)=[0-9A-Fa-f-]{1,64}|LABEL=[A-Za-z0-9_.-]{1,64}"
)


def mac_address(value: str) -> str:
    """An Ethernet MAC of a NIC: six hex pairs joined by ':' (or '-'); stored lower case with ':'.
    A multicast or all-zero address is no NIC's."""
    low = value.strip().lower()
    if not _MAC.fullmatch(low) or len(set(low[2::3])) != 1:
        raise ValueError(f"{value!r} is not a MAC address (six hex pairs joined by ':', e.g. 0c:c4:7a:00:00:01)")
    mac = low.replace("-", ":")
    first = int(mac[:2], 16)
    if first & 1 or mac == "00:00:00:00:00:00":
        raise ValueError(f"{value!r} is a multicast or all-zero address, not a NIC's: give the boot NIC's own MAC")
    return mac


def interface_name(value: str) -> str:
    """A Linux network interface name (15 characters at most: letters, digits, '_', '.', '-')."""
    if not _IFNAME.fullmatch(value) or value in {".", ".."}:
        raise ValueError(f"{value!r} is not an interface name (15 at most: letters, digits, '_', '.', '-')")
    return value


def server_address(value: str) -> str:
    """The control host's IPv4 address on the boot network with its prefix (``10.0.0.1/24``): the
    network the nodes boot in; a host address of it (not its network or broadcast address)."""
    try:
        iface = ipaddress.IPv4Interface(value)
    except ValueError as e:
        raise ValueError(f"{value!r} is not an IPv4 address with its prefix, e.g. 10.0.0.1/24 ({e})") from None
    net = iface.network
    if "/" not in value or not 8 <= net.prefixlen <= 30:
        raise ValueError(f"{value!r}: give the boot network's prefix, /8 to /30 (10.0.0.1/24, say)")
    if iface.ip in (net.network_address, net.broadcast_address):
        raise ValueError(f"{value!r} is the network or broadcast address of {net}, not a host's")
    return str(iface)


def plain_path(value: str) -> str:
    """An absolute path of plain segments (letters, digits, '_', '.', '+', '-'; no '..'), not ``/``."""
    if len(value) > 1024 or not _PLAIN_PATH.fullmatch(value) or "/../" in f"{value}/" or "/./" in f"{value}/":
        raise ValueError(
            f"{value!r} is not an absolute path of plain segments below / (letters, digits, '_', '.', '+', '-'; "
            "no spaces, ',', ':' or '..')"
        )
    return value


def root_device(value: str) -> str:
    """The root filesystem for the kernel's ``root=``: ``/dev/...``, ``UUID=``, ``PARTUUID=`` or ``LABEL=``."""
    if not _ROOT_DEVICE.fullmatch(value) or "/../" in f"{value}/":
        raise ValueError(
            f"{value!r} is not a root device: /dev/<name>, UUID=<hex and '-'>, PARTUUID=<hex and '-'> "
            "or LABEL=<letters, digits, '_', '.', '-'>"
        )
    return value


MacAddress = Annotated[str, AfterValidator(mac_address)]
InterfaceName = Annotated[str, AfterValidator(interface_name)]
ServerAddress = Annotated[str, AfterValidator(server_address)]
PlainPath = Annotated[str, AfterValidator(plain_path)]
RootDevice = Annotated[str, AfterValidator(root_device)]


def _ipv4(value: str) -> str:
    ipaddress.IPv4Address(value)
    return value


Ipv4 = Annotated[str, AfterValidator(_ipv4)]


class DhcpMode(StrEnum):
    """Who gives the nodes their addresses."""

    DHCP = "dhcp"  # this server: the nodes' fixed addresses, and a range for anything else
    PROXY = "proxy"  # the site's DHCP server; this one only adds the boot information


class BootMode(StrEnum):
    """Where a booted node's root filesystem is."""

    STATELESS = "stateless"  # on the network (NFS), nothing on the node's disk
    DISK = "disk"  # on the node's own disk


class DhcpRange(StrictModel):
    """Addresses handed to machines the spec does not name (``mode: dhcp`` only)."""

    start: Ipv4 = live(description="First address of the range")
    end: Ipv4 = live(description="Last address of the range")

    @model_validator(mode="after")
    def _ordered(self) -> DhcpRange:
        if ipaddress.IPv4Address(self.start) > ipaddress.IPv4Address(self.end):
            raise ValueError(f"range start {self.start} is after its end {self.end}")
        return self


class ProvisioningServer(StrictModel):
    """The control host (where gpuforge runs) as the nodes' DHCP, TFTP and HTTP boot server."""

    interface: InterfaceName = live(description="Interface on the boot network dnsmasq listens on (eno1, say)")
    address: ServerAddress = live(
        description="This host's IPv4 address on that interface with the network's prefix (10.0.0.1/24); "
        "the nodes' addresses are in this network"
    )
    mode: DhcpMode = live(
        DhcpMode.DHCP, "dhcp (this host is the network's DHCP server) or proxy (the site's DHCP server gives "
        "the addresses, this host only the boot information)"
    )  # fmt: skip
    range: DhcpRange | None = live(
        None, "Addresses for machines the spec does not name (mode dhcp; none: only the spec's nodes get one)"
    )
    http_port: int = live(8080, "Port of the HTTP server that serves the iPXE scripts and images", ge=1, le=65535)
    tftp_root: PlainPath = live(
        "/usr/lib/ipxe",
        "Folder dnsmasq's TFTP serves: holds undionly.kpxe and ipxe.efi (Debian's ipxe package installs them here)",
    )


class Provisioning(StrictModel):
    """Network boot of the nodes from the control host (``gpuforge provision``)."""

    server: ProvisioningServer = live(description="The control host as the boot server")


class NodeBoot(StrictModel):
    """How a group's nodes boot over the network."""

    mode: BootMode = live(description="stateless (root on NFS from this host) or disk (root on the node's disk)")
    image: LocalPath = live(
        description="The group's baked image folder (gpuforge image build -o: vmlinuz and initrd.img in it); "
        "relative to the spec file's folder"
    )
    macs: dict[str, MacAddress] = live(
        description="Each node's boot NIC MAC address, by node name (every node of the group)"
    )
    nfs_export: PlainPath | None = live(
        None, "NFS export of the image's root filesystem on this host (mode stateless; refused for disk)"
    )
    root: RootDevice | None = live(
        None, "Root filesystem on the node's disk: /dev/..., UUID=, PARTUUID= or LABEL= (mode disk only)"
    )

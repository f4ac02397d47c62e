"""What ``gpuforge provision --serve`` checks before it starts anything, and the HTTP server's map.

Each problem names the spec field it comes from (``provisioning.server.interface``,
``node_groups[1].boot.image``, ...) or, for the host, what is missing; the command prints them all
and exits 2 with nothing written and nothing started.

Invariant: :func:`routes` is the whole served set: the URL paths of
:func:`gpuforge.render.pxe.served_files` (each node's script, its group's kernel and initrd), each to
one absolute file path fixed here; the HTTP server answers nothing else.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

from gpuforge.render import pxe
from gpuforge.spec.model import Spec
from gpuforge.spec.provisioning import ProvisioningServer

_SERVER = "provisioning.server"
#: Where dnsmasq is looked for besides PATH (Debian's dnsmasq-base installs /usr/sbin/dnsmasq).
SBIN = ("/usr/sbin", "/sbin")


def image_folder(image: str, spec_folder: Path) -> Path:
    """A group's ``boot.image`` as a path: ``~`` expanded, relative to the spec's folder."""
    path = Path(os.path.expanduser(image))
    return path if path.is_absolute() else spec_folder / path


def routes(spec: Spec, names: list[str], render_dir: Path, spec_folder: Path) -> dict[str, Path]:
    """URL path -> the absolute file the HTTP server answers it with (the rendered scripts in
    ``render_dir``, the groups' kernels and initrds in their image folders)."""
    out: dict[str, Path] = {}
    for url, served in pxe.served_files(spec, names).items():
        base = render_dir if served.image is None else image_folder(served.image, spec_folder)
        out[url] = Path(os.path.abspath(base / served.name))
    return out


def image_issues(spec: Spec, names: list[str], spec_folder: Path) -> list[str]:
    """A line per image file a chosen node's script loads that is not a regular file."""
    index = {g.name: i for i, g in enumerate(spec.node_groups)}
    issues: list[str] = []
    for served in pxe.served_files(spec, names).values():
        if served.image is None or served.group is None:
            continue
        path = image_folder(served.image, spec_folder) / served.name
        if not path.is_file():
            issues.append(
                f"node_groups[{index[served.group]}].boot.image: {path}: no such file "
                f"(gpuforge image build --format qcow2 writes {pxe.KERNEL_FILE} and {pxe.INITRD_FILE})"
            )
    return issues


def interface_addresses(interface: str) -> list[str] | None:
    """The IPv4 addresses with prefix of ``interface`` (``ip -j``), or None when ``ip`` cannot say."""
    ip = shutil.which("ip", path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    if ip is None:
        return None
    done = subprocess.run([ip, "-j", "-4", "addr", "show", "dev", interface], capture_output=True, text=True,
                          timeout=10, check=False)  # fmt: skip
    if done.returncode != 0:
        return None
    found = json.loads(done.stdout or "[]")
    return [f"{a['local']}/{a['prefixlen']}" for link in found for a in link.get("addr_info", [])]


def server_issues(server: ProvisioningServer) -> list[str]:
    """The interface exists and holds the address; the TFTP root is a folder."""
    issues: list[str] = []
    try:
        socket.if_nametoindex(server.interface)
    except OSError:
        issues.append(f"{_SERVER}.interface: no interface {server.interface} on this host")
    else:
        held = interface_addresses(server.interface)
        wanted = ipaddress.IPv4Interface(server.address)
        if held is not None and wanted not in {ipaddress.IPv4Interface(a) for a in held}:
            issues.append(
                f"{_SERVER}.address: {server.address} is not an address of {server.interface} "
                f"(it has {', '.join(held) or 'no IPv4 address'})"
            )
    if not Path(server.tftp_root).is_dir():
        issues.append(
            f"{_SERVER}.tftp_root: no folder {server.tftp_root} (Debian's ipxe package installs /usr/lib/ipxe)"
        )
    return issues


def dnsmasq_path() -> str | None:
    """The installed dnsmasq (PATH, then /usr/sbin and /sbin)."""
    return shutil.which("dnsmasq", path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))


def host_issues() -> list[str]:
    """dnsmasq is installed; this process may bind DHCP's port 67 and let dnsmasq drop to its user."""
    issues: list[str] = []
    if dnsmasq_path() is None:
        issues.append("--serve: dnsmasq is not installed (Debian: apt install dnsmasq-base)")
    if os.geteuid() != 0:
        issues.append("--serve: needs root: dnsmasq binds DHCP's port 67 and TFTP's 69, then drops to its own user")
    return issues


def bind_issue(server: ProvisioningServer, error: OSError) -> str:
    """Why the HTTP server's socket could not be bound, naming the field."""
    ip, port = pxe.server_ip(server), server.http_port
    if error.errno == errno.EADDRINUSE:
        return f"{_SERVER}.http_port: port {port} on {ip} is in use (another server listens there)"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{_SERVER}.address: {ip} is not an address of this host"
    if error.errno == errno.EACCES:
        return f"{_SERVER}.http_port: port {port} is below 1024 and needs root"
    return f"{_SERVER}.http_port: cannot listen on {ip}:{port}: {error.strerror or error}"

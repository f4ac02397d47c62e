"""The GPU fabric as a node shows it: RDMA devices and ports (sysfs), the RDMA kernel modules, and which
NIC each GPU is close to (``nvidia-smi topo -m``). Standard library only: the node program carries it.

Where each value comes from (Linux ``Documentation/ABI/stable/sysfs-class-infiniband``):

* ``/sys/class/infiniband/<dev>/node_type`` and ``fw_ver`` (ABI: "Node type (CA, RNIC, ...)", "Display
  firmware version"); ``ports/<n>/state`` ("4: ACTIVE"), ``phys_state`` ("5: LinkUp"), ``rate``
  ("100 Gb/sec (4X EDR)") and ``link_layer`` ("InfiniBand" or "Ethernet"): the strings
  ``drivers/infiniband/core/sysfs.c`` prints (``state_show``, ``phys_state_show``, ``rate_show``,
  ``link_layer_show``).
* ``ports/<n>/gid_attrs/ndevs/<i>`` ("The net-device's name associated with the GID") and
  ``gid_attrs/types/<i>`` ("IB/RoCE v1" or "RoCE v2") are in the ABI file; ``ports/<n>/gids/<i>`` is the
  GID table sysfs.c prints with ``%pI6`` (the ABI file documents it for mlx4's iov only).
* The netdev of a PCI device is ``<dev>/device/net/*``: ``device`` is the class device's parent link,
  which the ABI file does not describe; a software device (``rdma_rxe``) has no ``device`` link at all,
  so its netdev is read from GID 0's ``ndevs`` instead.
* ``/sys/module/<name>/initstate`` ("live, coming, going": ``Documentation/ABI/testing/sysfs-module``);
  a built-in module has a ``/sys/module/<name>`` folder (for its parameters) but no ``initstate``.

Invariant: the shell command and the in-process reader print the same lines; the parser is total.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from typing import TypedDict

from gpuforge.probes._common import guarded, split_guarded, to_int
from gpuforge.probes.nvidia_smi import NvidiaSmiStatus, smi_status
from gpuforge.probes.reading import Reading

SYSFS_INFINIBAND = "/sys/class/infiniband"
SYSFS_MODULE = "/sys/module"
#: Kernel modules whose state is always read (the health config may name more: ``fabric.modules``).
FABRIC_MODULES = ("ib_core", "ib_uverbs", "rdma_ucm", "ib_ipoib", "mlx5_ib", "rdma_rxe", "nvidia_peermem", "gdrdrv")
#: GID table entries read per port (RoCE lists its IPv4 GIDs within the first few; mlx5 has 255 slots).
GID_SLOTS = 16
DEVICE_FILES = ("node_type", "fw_ver")
PORT_FILES = ("state", "phys_state", "rate", "link_layer")
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")
_MODULE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class Gid(TypedDict):
    index: int
    gid: str
    ndev: str | None
    type: str | None
    ipv4: str | None
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``, what RoCE v2 routes on)."""


class RdmaPort(TypedDict):
    port: int
    state: str | None
    """``ACTIVE``, ``DOWN``, ... (the word after the number)."""
    phys_state: str | None
    rate_gbps: float | None
    rate: str | None
    link_layer: str | None
    gids: list[Gid]


class RdmaDevice(TypedDict):
    name: str
    node_type: str | None
    fw_ver: str | None
    netdevs: list[str]
    ports: list[RdmaPort]


class RdmaInfo(TypedDict):
    """What :data:`RDMA` reads; ``readable`` False: the reading failed (``error`` says why)."""

    readable: bool
    error: str | None
    class_present: bool
    """``/sys/class/infiniband`` exists (ib_core is loaded)."""
    devices: list[RdmaDevice]
    modules: dict[str, str]
    """Module name -> ``live``, ``coming``, ``going``, ``builtin`` or ``absent``."""


def module_names(modules: Sequence[str] | str = FABRIC_MODULES) -> list[str]:
    """:data:`FABRIC_MODULES` and ``modules`` (names only: anything else is left out), once each, in order."""
    names = [m.strip() for m in (modules.split(",") if isinstance(modules, str) else modules)]
    return list(dict.fromkeys([*FABRIC_MODULES, *(m for m in names if _MODULE_RE.match(m))]))


def rdma_command(
    root: str = SYSFS_INFINIBAND, modules_root: str = SYSFS_MODULE, modules: Sequence[str] | str = FABRIC_MODULES
) -> str:
    """``__dev=``/``__port=`` blocks of ``key=value`` lines, ``gid=<i> <gid> <ndev|-> <type>``, one
    ``__module=<name> <state>`` per module (:func:`module_names`), then ``__rc=0`` (``__class=absent``: no root)."""
    slots = " ".join(str(i) for i in range(GID_SLOTS))
    dev_files = " ".join(DEVICE_FILES)
    port_files = " ".join(PORT_FILES)
    mods = shlex.quote(modules_root)
    return (
        f'(r={shlex.quote(root)}; if [ -d "$r" ]; then for d in "$r"/*; do [ -e "$d" ] || continue; '
        'echo "__dev=${d##*/}"; '
        f'for f in {dev_files}; do v=$(cat "$d/$f" 2>/dev/null) && echo "$f=$v"; done; '
        'for x in "$d"/device/net/*; do [ -e "$x" ] && echo "netdev=${x##*/}"; done; '
        'for p in "$d"/ports/*; do [ -e "$p" ] || continue; echo "__port=${p##*/}"; '
        f'for f in {port_files}; do v=$(cat "$p/$f" 2>/dev/null) && echo "$f=$v"; done; '
        f'for i in {slots}; do g=$(cat "$p/gids/$i" 2>/dev/null) || continue; '
        f'[ -n "$g" ] && [ "$g" != {ZERO_GID} ] || continue; '
        'n=$(cat "$p/gid_attrs/ndevs/$i" 2>/dev/null); t=$(cat "$p/gid_attrs/types/$i" 2>/dev/null); '
        'echo "gid=$i $g ${n:--} $t"; done; done; done; else echo "__class=absent"; fi; '
        f"for m in {' '.join(module_names(modules))}; do s=absent; "
        f"if [ -r {mods}/$m/initstate ]; then s=$(cat {mods}/$m/initstate); "
        f"elif [ -d {mods}/$m ]; then s=builtin; fi; "
        'echo "__module=$m $s"; done; echo "__rc=0")'
    )


def _cat(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _listing(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _port_lines(port: str) -> list[str]:
    lines = [f"{name}={value}" for name in PORT_FILES if (value := _cat(os.path.join(port, name))) is not None]
    for i in range(GID_SLOTS):
        gid = _cat(os.path.join(port, "gids", str(i)))
        if not gid or gid == ZERO_GID:
            continue
        ndev = _cat(os.path.join(port, "gid_attrs", "ndevs", str(i))) or "-"
        kind = _cat(os.path.join(port, "gid_attrs", "types", str(i))) or ""
        lines.append(f"gid={i} {gid} {ndev} {kind}")
    return lines


def read_rdma(
    root: str = SYSFS_INFINIBAND, modules_root: str = SYSFS_MODULE, modules: Sequence[str] | str = FABRIC_MODULES
) -> list[str]:
    """What :func:`rdma_command` prints, read in-process."""
    lines: list[str] = []
    if os.path.isdir(root):
        for dev in _listing(root):
            path = os.path.join(root, dev)
            lines.append(f"__dev={dev}")
            lines += [f"{f}={v}" for f in DEVICE_FILES if (v := _cat(os.path.join(path, f))) is not None]
            lines += [f"netdev={n}" for n in _listing(os.path.join(path, "device", "net"))]
            for port in _listing(os.path.join(path, "ports")):
                lines += [f"__port={port}", *_port_lines(os.path.join(path, "ports", port))]
    else:
        lines.append("__class=absent")
    for module in module_names(modules):
        state = _cat(os.path.join(modules_root, module, "initstate"))
        if state is None:
            state = "builtin" if os.path.isdir(os.path.join(modules_root, module)) else "absent"
        lines.append(f"__module={module} {state}")
    return [*lines, "__rc=0"]


def _word(value: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` -> ``LinkUp``."""
    return value.split(":", 1)[1].strip() if ":" in value else value.strip()


def ipv4_of(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``0000:...:ffff:0a00:0001`` -> ``10.0.0.1``)."""
    groups = gid.lower().split(":")
    if len(groups) != 8 or groups[:6] != ["0000"] * 5 + ["ffff"]:
        return None
    try:
        a, b = int(groups[6], 16), int(groups[7], 16)
    except ValueError:
        return None
    return f"{a >> 8}.{a & 255}.{b >> 8}.{b & 255}"


def _gid(value: str) -> Gid | None:
    parts = value.split(" ", 3)
    if len(parts) < 3 or to_int(parts[0]) is None:
        return None
    ndev = parts[2] if parts[2] != "-" else None
    return Gid(index=int(parts[0]), gid=parts[1], ndev=ndev, type=(parts[3].strip() if len(parts) > 3 else None)
               or None, ipv4=ipv4_of(parts[1]))  # fmt: skip


def _port_value(port: RdmaPort, key: str, value: str) -> None:
    if key == "state":
        port["state"] = _word(value) or None
    elif key == "phys_state":
        port["phys_state"] = _word(value) or None
    elif key == "rate":
        port["rate"] = value or None
        m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec", value)
        port["rate_gbps"] = float(m.group(1)) if m else None
    elif key == "link_layer":
        port["link_layer"] = value or None
    elif key == "gid" and (gid := _gid(value)) is not None:
        port["gids"].append(gid)


def parse_rdma(lines: list[str]) -> RdmaInfo:
    """Parse :func:`rdma_command` output into devices (with ports and GIDs) and module states."""
    out = split_guarded(lines)
    info = RdmaInfo(readable=out.ok and out.rc is not None, error=None, class_present=True, devices=[], modules={})
    if out.timeout is not None:
        info["error"] = f"reading sysfs took longer than {out.timeout} s"
    elif out.error is not None:
        info["error"] = out.error
    device: RdmaDevice | None = None
    port: RdmaPort | None = None
    for line in out.lines:
        key, _, value = line.partition("=")
        value = value.strip()
        if key == "__class":
            info["class_present"] = False
        elif key == "__module":
            name, _, state = value.partition(" ")
            if _NAME_RE.match(name):
                info["modules"][name] = state.strip() or "absent"
        elif key == "__dev" and _NAME_RE.match(value):
            device = RdmaDevice(name=value, node_type=None, fw_ver=None, netdevs=[], ports=[])
            info["devices"].append(device)
            port = None
        elif device is None:
            continue
        elif key == "__port" and to_int(value) is not None:
            port = RdmaPort(port=int(value), state=None, phys_state=None, rate_gbps=None, rate=None,
                            link_layer=None, gids=[])  # fmt: skip
            device["ports"].append(port)
        elif port is None and key == "node_type":
            device["node_type"] = value or None
        elif port is None and key == "fw_ver":
            device["fw_ver"] = value or None
        elif port is None and key == "netdev" and value:
            device["netdevs"].append(value)
        elif port is not None:
            _port_value(port, key, value)
    return info


RDMA: Reading[RdmaInfo] = Reading("fabric.rdma", rdma_command, parse_rdma, local=read_rdma)


# --------------------------------------------------------------------------- nvidia-smi topo -m: GPU <-> NIC

#: Link words of ``nvidia-smi topo -m`` from nearest to farthest (its legend); ``NV#`` joins GPUs only.
NIC_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")


class GpuNicTopology(NvidiaSmiStatus):
    """Per GPU, how it reaches each NIC (``{"GPU0": {"mlx5_0": "PXB", ...}}``, the NIC Legend's names;
    ``NIC3`` where the legend is missing); ``nics``: the legend (``NIC0`` -> ``mlx5_0``)."""

    gpus: list[str]
    nics: dict[str, str]
    affinity: dict[str, dict[str, str]]


def parse_gpu_nic_topology(lines: list[str]) -> GpuNicTopology:
    """The GPU rows' NIC columns of ``nvidia-smi topo -m`` (tab separated) and its ``NIC Legend:``."""
    status, body = smi_status(lines)
    info = GpuNicTopology(**status, gpus=[], nics={}, affinity={})
    header: list[str] | None = None
    raw: dict[str, dict[str, str]] = {}
    for line in body:
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if legend:
            info["nics"][legend.group(1)] = legend.group(2)
            continue
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            if len(cells) > 1 and cells[0] == "" and cells[1].startswith("GPU"):
                header = cells[1:]
            continue
        if re.fullmatch(r"GPU\d+", cells[0]):
            info["gpus"].append(cells[0])
            raw[cells[0]] = {col: val for col, val in zip(header, cells[1:], strict=False) if col.startswith("NIC")}
    for gpu, row in raw.items():
        info["affinity"][gpu] = {info["nics"].get(nic, nic): link for nic, link in row.items()}
    return info


def topology_command() -> str:
    """``nvidia-smi topo -m`` (the same command as ``nvidia_smi.GPU_TOPOLOGY``: the node program reads it once)."""
    return guarded("nvidia-smi", "nvidia-smi topo -m")


GPU_NIC_TOPOLOGY: Reading[GpuNicTopology] = Reading("fabric.gpu_nic_topology", topology_command, parse_gpu_nic_topology)

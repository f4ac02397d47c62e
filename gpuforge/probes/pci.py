"""The NVIDIA functions on the PCI bus, from ``lspci`` or from sysfs (no lspci, no driver needed).

Both readings give the same typed value (:class:`NvidiaPciInfo`), sorted into GPUs, NVSwitches
and other functions by :func:`pci_kind`, the one classification every PCI reading uses.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import TypedDict

from gpuforge.probes._common import guarded, normalize_pci_address, split_guarded
from gpuforge.probes.reading import Reading

#: PCI device IDs of NVSwitch chips (A100 generation 10de:1af1, H100 generation 10de:22a3).
NVSWITCH_DEVICE_IDS: frozenset[str] = frozenset({"1af1", "22a3"})
#: PCI classes of GPUs: the display class 03 (pci.ids: VGA compatible 0300, XGA 0301, 3D controller 0302,
#: Display controller 0380). Data-center boards report 0302, some boards 0380 (e.g. ``Display controller
#: [0380]: NVIDIA Corporation GA107``); NVSwitches are bridges (0680), never counted here.
GPU_PCI_CLASSES: frozenset[str] = frozenset({"0300", "0301", "0302", "0380"})


def pci_kind(class_id: str, device_id: str, description: str = "") -> str:
    """``"gpu"``, ``"nvswitch"`` or ``"other"`` for an NVIDIA PCI function (class and device id in
    lower-case hex, ``0302`` and ``2330``)."""
    if class_id in GPU_PCI_CLASSES:
        return "gpu"
    if device_id in NVSWITCH_DEVICE_IDS or "nvswitch" in description.lower() or class_id == "0680":
        return "nvswitch"
    return "other"


# --------------------------------------------------------------------------- lspci

LSPCI_SOURCE = "lspci -d 10de:"
SYSFS_PCI_ROOT = "/sys/bus/pci/devices"


class PciDevice(TypedDict):
    """One NVIDIA PCI function (from sysfs: no class name, description ``10de:<device>``)."""

    address: str
    class_id: str
    class_name: str
    vendor_id: str
    device_id: str
    description: str
    revision: str | None


class NvidiaPciInfo(TypedDict):
    """NVIDIA devices on the PCI bus, split by kind; ``readable`` is False when ``source`` could not
    be read (no lspci, or sysfs unreadable)."""

    source: str
    readable: bool
    gpus: list[PciDevice]
    nvswitches: list[PciDevice]
    other: list[PciDevice]


_LSPCI_RE = re.compile(
    r"^(?P<address>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<class_name>.+?)\s+\[(?P<class_id>[0-9a-fA-F]{4})\]:\s+"
    r"(?P<description>.*?)\s*\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]"
    r"(?:\s+\(rev\s+(?P<rev>[0-9a-fA-F]+)\))?"
)


def parse_lspci_line(line: str) -> PciDevice | None:
    """Parse one ``lspci -nn`` / ``lspci -Dnn`` line; None when it does not match."""
    match = _LSPCI_RE.match(line.strip())
    if match is None:
        return None
    return PciDevice(
        address=normalize_pci_address(match.group("address")),
        class_id=match.group("class_id").lower(),
        class_name=match.group("class_name"),
        vendor_id=match.group("vendor").lower(),
        device_id=match.group("device").lower(),
        description=match.group("description"),
        revision=match.group("rev"),
    )


def _sort_devices(source: str, readable: bool, devices: list[PciDevice]) -> NvidiaPciInfo:
    info = NvidiaPciInfo(source=source, readable=readable, gpus=[], nvswitches=[], other=[])
    for device in devices:
        kind = pci_kind(device["class_id"], device["device_id"], device["description"])
        info["gpus" if kind == "gpu" else "nvswitches" if kind == "nvswitch" else "other"].append(device)
    return info


def parse_lspci_nvidia(lines: list[str]) -> NvidiaPciInfo:
    """Split ``lspci -Dnn -d 10de:`` output into GPUs, NVSwitches and other functions."""
    out = split_guarded(lines)
    devices = [d for d in map(parse_lspci_line, out.lines) if d is not None and d["vendor_id"] == "10de"]
    return _sort_devices(LSPCI_SOURCE, out.available and out.timeout is None, devices)


# --------------------------------------------------------------------------- sysfs (no lspci needed)


def sysfs_pci_command(root: str = SYSFS_PCI_ROOT) -> str:
    """``<address> <class> <device>`` of each NVIDIA function under ``root``, then ``__rc=0`` (in a
    subshell: the caller's working directory stays)."""
    return (
        f"(if cd {shlex.quote(root)} 2>/dev/null; then for d in *; do "
        '[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && echo "$d $(cat "$d/class") $(cat "$d/device")"; '
        f'done; echo "__rc=0"; else echo "__error=cannot read {root}"; fi)'
    )


def read_sysfs_pci(root: str = SYSFS_PCI_ROOT) -> list[str]:
    """What :func:`sysfs_pci_command` prints, read in-process (a few hundred ``cat`` less)."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return [f"__error=cannot read {root}"]
    lines = []
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "vendor")) as f:
                if f.read().strip().lower() != "0x10de":
                    continue
            with open(os.path.join(root, entry, "class")) as f:
                klass = f.read().strip().lower()
            with open(os.path.join(root, entry, "device")) as f:
                device = f.read().strip().lower()
        except OSError:
            continue
        lines.append(f"{entry} {klass} {device}")
    return [*lines, "__rc=0"]


def parse_sysfs_pci(lines: list[str]) -> NvidiaPciInfo:
    """Parse ``<address> <class> <device>`` lines (``0000:1b:00.0 0x030200 0x2330``)."""
    out = split_guarded(lines)
    devices = []
    for line in out.lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        device_id = parts[2].lower().removeprefix("0x")
        devices.append(
            PciDevice(
                address=normalize_pci_address(parts[0]),
                class_id=parts[1].lower().removeprefix("0x")[:4],
                class_name="",
                vendor_id="10de",
                device_id=device_id,
                description=f"10de:{device_id}",
                revision=None,
            )
        )
    return _sort_devices(SYSFS_PCI_ROOT, out.error is None and out.timeout is None, devices)


NVIDIA_PCI: Reading[NvidiaPciInfo] = Reading(
    "nvidia.pci_devices", lambda: guarded("lspci", "lspci -Dnn -d 10de:"), parse_lspci_nvidia
)
NVIDIA_SYSFS_PCI: Reading[NvidiaPciInfo] = Reading(
    "nvidia.sysfs_pci", sysfs_pci_command, parse_sysfs_pci, local=read_sysfs_pci
)

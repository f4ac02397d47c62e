"""What the NVIDIA deploys must know about a host before they build its layers (stdlib only).

One round trip per GPU node (:data:`NVIDIA_HOST`, the deploy's ``NvidiaHost`` fact): the NVIDIA
devices on the PCI bus (from sysfs, no lspci needed), the loaded kernel driver version, and
installed versions of packages that gpuforge installs outside apt/dnf repositories (enroot from
release files) or on rpm systems (where the layer facts' dpkg query sees nothing). Layers decide
from these facts, e.g. whether a service that needs a GPU can run at all, so re-runs do not keep
trying.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.probes.pci import parse_sysfs_pci, sysfs_pci_command
from gpuforge.probes.reading import Reading

_PKG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._-]*$")


@dataclass
class HostFacts:
    """NVIDIA-relevant state of one host (plain data: fixtures build it from JSON)."""

    gpus: list[str] = field(default_factory=list)
    """PCI device IDs of NVIDIA display/3D controllers (lower-case hex, e.g. ``2330``)."""
    nvswitches: list[str] = field(default_factory=list)
    """PCI device IDs of NVIDIA NVSwitch bridges."""
    loaded_driver: str | None = None
    """Version of the loaded ``nvidia`` kernel module (None: not loaded)."""
    packages: dict[str, str | None] = field(default_factory=dict)
    """Installed versions of the queried packages (dpkg or rpm; None: not installed)."""
    package_tool: str | None = None
    """``dpkg`` or ``rpm``: which database answered."""
    kernel_release: str | None = None
    """``uname -r`` of the running kernel (DKMS builds against its headers)."""
    machine: str | None = None
    """``uname -m``: the CPU architecture the node runs (``x86_64``, ``aarch64``)."""
    secure_boot: bool | None = None
    """UEFI Secure Boot on (``mokutil --sb-state``); None when unknown (no mokutil, no EFI)."""

    @property
    def gpu_present(self) -> bool:
        return bool(self.gpus)

    @property
    def driver_loaded(self) -> bool:
        return self.loaded_driver is not None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        return cls(
            gpus=list(data.get("gpus", [])),
            nvswitches=list(data.get("nvswitches", [])),
            loaded_driver=data.get("loaded_driver"),
            packages=dict(data.get("packages", {})),
            package_tool=data.get("package_tool"),
            kernel_release=data.get("kernel_release"),
            machine=data.get("machine"),
            secure_boot=data.get("secure_boot"),
        )


def nvidia_host_command(packages: Sequence[str] = ()) -> str:
    names = [p for p in packages if _PKG_RE.match(p)]
    if len(names) != len(packages):
        raise ValueError(f"invalid package names: {sorted(set(packages) - set(names))}")
    joined = " ".join(shlex.quote(n) for n in names)
    parts = [
        "echo __section=pci",
        sysfs_pci_command(),
        "echo __section=driver",
        "cat /sys/module/nvidia/version 2>/dev/null || "
        "sed -n 's/.*Kernel Module[^0-9]*\\([0-9][0-9.]*\\).*/\\1/p' /proc/driver/nvidia/version 2>/dev/null",
        "echo __section=kernel",
        "uname -r",
        "echo __section=machine",
        "uname -m",
        "echo __section=secureboot",
        "mokutil --sb-state 2>/dev/null",
        "echo __section=packages",
    ]
    if names:
        parts.append(f"echo __query={joined}")
        parts.append(
            "if command -v dpkg-query >/dev/null 2>&1; then echo __tool=dpkg; "
            f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {joined} 2>/dev/null; "
            "elif command -v rpm >/dev/null 2>&1; then echo __tool=rpm; "
            f"rpm -q --qf '%{{NAME}}\\t%{{VERSION}}-%{{RELEASE}}\\tii\\n' {joined} 2>/dev/null "
            "| grep -v 'is not installed'; "
            "fi"
        )
    return "; ".join(parts) + "; true"


def parse_nvidia_host(lines: list[str]) -> HostFacts:
    """Parse :func:`nvidia_host_command`'s sections (the PCI one with :func:`parse_sysfs_pci`)."""
    facts = HostFacts()
    section = None
    pci: list[str] = []
    for raw in lines:
        line = raw.strip()
        if line.startswith("__section="):
            section = line.split("=", 1)[1]
            continue
        if section == "pci":
            pci.append(line)
        elif section == "driver" and line and facts.loaded_driver is None:
            facts.loaded_driver = line
        elif section == "kernel" and line and facts.kernel_release is None:
            facts.kernel_release = line if _PKG_RE.match(line) else None
        elif section == "machine" and line and facts.machine is None:
            facts.machine = line if _PKG_RE.match(line) else None
        elif section == "secureboot" and line.startswith("SecureBoot "):
            facts.secure_boot = line.split()[1] == "enabled"
        elif section == "packages":
            if line.startswith("__tool="):
                facts.package_tool = line.split("=", 1)[1]
                continue
            if line.startswith("__query="):
                facts.packages.update(dict.fromkeys(line.split("=", 1)[1].split()))
                continue
            cols = raw.rstrip("\n").split("\t")
            if len(cols) >= 3 and cols[0] in facts.packages and len(cols[2]) >= 2 and cols[2][1] == "i":
                facts.packages[cols[0]] = cols[1].strip() or None
    bus = parse_sysfs_pci(pci)
    facts.gpus = [d["device_id"] for d in bus["gpus"]]
    facts.nvswitches = [d["device_id"] for d in bus["nvswitches"]]
    return facts


NVIDIA_HOST: Reading[HostFacts] = Reading("nvidia.host", nvidia_host_command, parse_nvidia_host)

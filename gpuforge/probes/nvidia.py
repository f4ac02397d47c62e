"""NVIDIA readings without nvidia-smi: the kernel driver and modules, Xid errors, NVSwitches.

They work on a node with no (or a broken) driver. Missing tools and unreadable files are reported
in the parsed value, never raised. The PCI bus is read by :mod:`gpuforge.probes.pci`, nvidia-smi by
:mod:`gpuforge.probes.nvidia_smi`.
"""

from __future__ import annotations

import re
from typing import TypedDict

from gpuforge.probes._common import normalize_pci_address, parse_marker, split_guarded, to_int
from gpuforge.probes.reading import Reading

# --------------------------------------------------------------------------- driver version


class DriverVersionInfo(TypedDict):
    """Kernel driver version from procfs and sysfs."""

    loaded: bool
    version: str | None
    proc_version: str | None
    sys_module_version: str | None
    open_kernel_module: bool | None
    refcnt: int | None
    nvrm_line: str | None
    gcc_version: str | None


_NVRM_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<version>\d+(?:\.\d+)+)")


def parse_driver_version(lines: list[str]) -> DriverVersionInfo:
    """Parse ``/proc/driver/nvidia/version`` plus ``__sysmod=``/``__refcnt=`` markers."""
    info = DriverVersionInfo(
        loaded=False,
        version=None,
        proc_version=None,
        sys_module_version=None,
        open_kernel_module=None,
        refcnt=None,
        nvrm_line=None,
        gcc_version=None,
    )
    for line in lines:
        marker = parse_marker(line)
        if marker is not None:
            key, value = marker
            if key == "sysmod":
                info["sys_module_version"] = value.strip() or None
            elif key == "refcnt":
                info["refcnt"] = to_int(value)
            continue
        if line.startswith("NVRM version:"):
            info["nvrm_line"] = line.strip()
            info["open_kernel_module"] = "Open Kernel Module" in line
            match = _NVRM_RE.search(line)
            if match:
                info["proc_version"] = match.group("version")
        elif line.startswith("GCC version:"):
            info["gcc_version"] = line.split(":", 1)[1].strip() or None
    info["version"] = info["proc_version"] or info["sys_module_version"]
    info["loaded"] = info["nvrm_line"] is not None or info["sys_module_version"] is not None
    return info


# --------------------------------------------------------------------------- Xid errors


class XidEvent(TypedDict):
    """One ``NVRM: Xid`` kernel log line.

    ``pci_address`` gets function ``.0`` appended (the log omits it; GPUs are function 0) so it
    joins with the GPU query's ``pci_address``.
    """

    code: int
    pci_address: str
    pid: int | None
    process_name: str | None
    message: str
    timestamp: str | None
    raw: str


class XidInfo(TypedDict):
    """What :data:`XID_ERRORS` reads; ``source`` is None when no kernel log could be read.

    How serious each code is, is not the parser's to say: ``gpuforge.spec.xid_catalog`` says.
    """

    source: str | None
    events: list[XidEvent]
    codes: list[int]


_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\): "
    r"(?P<code>\d+)(?:, (?P<rest>.*))?$"
)
_XID_PID_RE = re.compile(r"^pid=(?P<pid>'?[^,']*'?), name=(?P<name>[^,]*)(?:, (?P<msg>.*))?$")


def parse_xid_line(line: str) -> XidEvent | None:
    """Parse one kernel log line containing ``NVRM: Xid (PCI:dddd:bb:dd): code, ...``."""
    match = _XID_RE.search(line.rstrip())
    if match is None:
        return None
    code = int(match.group("code"))
    rest = (match.group("rest") or "").strip()
    pid: int | None = None
    process_name: str | None = None
    message = rest
    pid_match = _XID_PID_RE.match(rest)
    if pid_match:
        pid = to_int(pid_match.group("pid").strip("'"))
        name = pid_match.group("name").strip()
        process_name = None if name in {"", "<unknown>"} else name
        message = (pid_match.group("msg") or "").strip()
    prefix = line[: match.start()].strip()
    pci = normalize_pci_address(match.group("pci"))
    return XidEvent(
        code=code,
        pci_address=pci if "." in pci else f"{pci}.0",
        pid=pid,
        process_name=process_name,
        message=message,
        timestamp=prefix or None,
        raw=line.rstrip(),
    )


def parse_xid_errors(lines: list[str]) -> XidInfo:
    """Collect Xid events; ``__source=`` marker says which log was read."""
    source: str | None = None
    events: list[XidEvent] = []
    for line in lines:
        marker = parse_marker(line)
        if marker is not None:
            if marker[0] == "source":
                source = None if marker[1] in {"", "none"} else marker[1]
            continue
        event = parse_xid_line(line)
        if event is not None:
            events.append(event)
    return XidInfo(source=source, events=events, codes=sorted({event["code"] for event in events}))


# --------------------------------------------------------------------------- kernel modules


class KernelModule(TypedDict):
    """One loaded module from ``/proc/modules``."""

    size: int | None
    refcount: int | None
    used_by: list[str]
    state: str | None


class KernelModulesInfo(TypedDict):
    """Loaded modules keyed by name; ``readable`` is False when ``/proc/modules`` could not be read."""

    readable: bool
    modules: dict[str, KernelModule]


def parse_proc_modules(lines: list[str]) -> KernelModulesInfo:
    """Parse ``/proc/modules`` (``name size refcount used_by state address [taint]``)."""
    out = split_guarded(lines)
    modules: dict[str, KernelModule] = {}
    for line in out.lines:
        parts = line.split()
        if len(parts) < 5:
            continue
        used_by = [name for name in parts[3].split(",") if name and name != "-"]
        modules[parts[0]] = KernelModule(
            size=to_int(parts[1]), refcount=to_int(parts[2]), used_by=used_by, state=parts[4]
        )
    return KernelModulesInfo(readable=out.rc == 0 or bool(modules), modules=modules)


# --------------------------------------------------------------------------- NVSwitch procfs


class NvswitchInfo(TypedDict):
    """NVSwitches registered with the NVIDIA driver.

    ``present``: the ``nvidia-nvswitch`` procfs directory exists (driver loaded with NVSwitch
    support); ``devices``: its entries. Fabric Manager is needed when ``devices`` is non-empty.
    """

    present: bool
    devices: list[str]


def parse_nvswitch_devices(lines: list[str]) -> NvswitchInfo:
    """Parse ``ls -1 /proc/driver/nvidia-nvswitch/devices`` (one PCI address per entry)."""
    out = split_guarded(lines)
    devices = sorted(
        normalize_pci_address(entry)
        for line in out.lines
        for entry in line.split()
        if re.match(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", entry)
    )
    return NvswitchInfo(present=out.rc == 0, devices=devices)


# --------------------------------------------------------------------------- readings

XID_COMMAND = (
    "if dmesg >/dev/null 2>&1; then echo '__source=dmesg'; dmesg | grep -a 'NVRM: Xid'; "
    "elif command -v journalctl >/dev/null 2>&1; then echo '__source=journalctl'; "
    "journalctl -k -b --no-pager -q 2>/dev/null | grep -a 'NVRM: Xid'; "
    "else echo '__source=none'; fi; true"
)
DRIVER_COMMAND = (
    "cat /proc/driver/nvidia/version 2>/dev/null; "
    'echo "__sysmod=$(cat /sys/module/nvidia/version 2>/dev/null)"; '
    'echo "__refcnt=$(cat /sys/module/nvidia/refcnt 2>/dev/null)"'
)

DRIVER_VERSION: Reading[DriverVersionInfo] = Reading(
    "nvidia.driver_version", lambda: DRIVER_COMMAND, parse_driver_version
)
XID_ERRORS: Reading[XidInfo] = Reading("nvidia.xid_errors", lambda: XID_COMMAND, parse_xid_errors)
KERNEL_MODULES: Reading[KernelModulesInfo] = Reading(
    "nvidia.kernel_modules", lambda: 'cat /proc/modules 2>/dev/null; echo "__rc=$?"', parse_proc_modules
)
NVSWITCH_DEVICES: Reading[NvswitchInfo] = Reading(
    "nvidia.nvswitch_devices",
    lambda: 'ls -1 /proc/driver/nvidia-nvswitch/devices 2>/dev/null; echo "__rc=$?"',
    parse_nvswitch_devices,
)

"""NVIDIA driver and GPU facts: PCI devices, nvidia-smi queries, driver version, Xid errors.

Each fact is a thin :class:`pyinfra.api.FactBase` wrapper around a pure ``parse_*`` function,
so the validator can run the same commands locally and reuse the parsers.
Missing tools and failing ``nvidia-smi`` calls are reported in the result, never raised.
"""

from __future__ import annotations

import re
from typing import TypedDict

from gpuforge.probes._common import (
    na_to_none,
    normalize_pci_address,
    parse_marker,
    split_csv,
    split_guarded,
    to_int,
    yes_no,
)
from gpuforge.probes.nvidia_host import NVSWITCH_DEVICE_IDS

#: nvidia-smi exit codes (``man nvidia-smi``, RETURN VALUE section).
NVIDIA_SMI_EXIT_CODES: dict[int, str] = {
    0: "success",
    2: "a supplied argument or flag is invalid",
    3: "the requested operation is not available on the target device",
    4: "the current user does not have permission to access this device or perform this operation",
    6: "a query to find an object was unsuccessful",
    8: "a device's external power cables are not properly attached",
    9: "NVIDIA driver is not loaded (nvidia-smi could not communicate with the NVIDIA driver)",
    10: "NVIDIA kernel detected an interrupt issue with a GPU",
    12: "NVML shared library could not be found or loaded",
    13: "local version of NVML does not implement this function",
    14: "infoROM is corrupted",
    15: "the GPU has fallen off the bus or has otherwise become inaccessible",
    255: "other error or internal driver error occurred",
}

#: Xid codes treated as serious (hardware / driver faults needing drain, reset or RMA).
SERIOUS_XIDS: frozenset[int] = frozenset({48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120})

#: PCI classes of GPUs: the display class 03 (pci.ids: VGA compatible 0300, XGA 0301, 3D controller 0302,
#: Display controller 0380). Data-center boards report 0302, some boards 0380 (e.g. ``Display controller
#: [0380]: NVIDIA Corporation GA107``); NVSwitches are bridges (0680), never counted here.
GPU_PCI_CLASSES: frozenset[str] = frozenset({"0300", "0301", "0302", "0380"})


class NvidiaSmiStatus(TypedDict):
    """How an nvidia-smi based fact's command went."""

    available: bool
    rc: int | None
    error: str | None
    messages: list[str]


def explain_nvidia_smi_rc(rc: int | None, available: bool = True) -> str | None:
    """Human explanation of an nvidia-smi exit code; None for success."""
    if not available:
        return "nvidia-smi not found (NVIDIA driver utilities not installed)"
    if rc is None or rc == 0:
        return None
    return f"nvidia-smi exit code {rc}: {NVIDIA_SMI_EXIT_CODES.get(rc, 'unknown error')}"


def _smi_status(lines: list[str]) -> tuple[NvidiaSmiStatus, list[str]]:
    out = split_guarded(lines)
    status = NvidiaSmiStatus(
        available=out.available,
        rc=out.rc,
        error=explain_nvidia_smi_rc(out.rc, out.available),
        messages=[],
    )
    return status, out.lines


# --------------------------------------------------------------------------- lspci


class PciDevice(TypedDict):
    """One NVIDIA device from ``lspci -Dnn``."""

    address: str
    class_id: str
    class_name: str
    vendor_id: str
    device_id: str
    description: str
    revision: str | None


class NvidiaPciInfo(TypedDict):
    """NVIDIA devices on the PCI bus, split by kind."""

    lspci_available: bool
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


def classify_pci_device(device: PciDevice) -> str:
    """Return ``"gpu"``, ``"nvswitch"`` or ``"other"`` for an NVIDIA PCI device."""
    if device["class_id"] in GPU_PCI_CLASSES:
        return "gpu"
    if (
        device["device_id"] in NVSWITCH_DEVICE_IDS
        or "nvswitch" in device["description"].lower()
        or device["class_id"] == "0680"
    ):
        return "nvswitch"
    return "other"


def parse_lspci_nvidia(lines: list[str]) -> NvidiaPciInfo:
    """Split ``lspci -Dnn -d 10de:`` output into GPUs, NVSwitches and other functions."""
    out = split_guarded(lines)
    info = NvidiaPciInfo(lspci_available=out.available, gpus=[], nvswitches=[], other=[])
    for line in out.lines:
        device = parse_lspci_line(line)
        if device is None or device["vendor_id"] != "10de":
            continue
        kind = classify_pci_device(device)
        if kind == "gpu":
            info["gpus"].append(device)
        elif kind == "nvswitch":
            info["nvswitches"].append(device)
        else:
            info["other"].append(device)
    return info


# --------------------------------------------------------------------------- nvidia-smi --query-gpu

GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "persistence_mode",
    "memory.total",
    "ecc.errors.uncorrected.volatile.total",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "mig.mode.current",
    "mig.mode.pending",
)


class GpuInfo(TypedDict):
    """One GPU as reported by ``nvidia-smi --query-gpu``."""

    index: int | None
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    pci_address: str | None
    driver_version: str | None
    persistence_mode: bool | None
    memory_total_mib: int | None
    ecc_uncorrected_volatile: int | None
    pcie_link_width_current: int | None
    pcie_link_width_max: int | None
    mig_mode_current: str | None
    mig_mode_pending: str | None


class NvidiaSmiGpuInfo(NvidiaSmiStatus):
    """Result of :class:`NvidiaSmiGpus`."""

    gpus: list[GpuInfo]


def parse_gpu_query(lines: list[str]) -> NvidiaSmiGpuInfo:
    """Parse ``nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits``."""
    status, data = _smi_status(lines)
    gpus: list[GpuInfo] = []
    for line in data:
        cells = split_csv(line)
        if len(cells) != len(GPU_QUERY_FIELDS) or to_int(cells[0]) is None:
            if line.strip():
                status["messages"].append(line.strip())
            continue
        values = [na_to_none(cell) for cell in cells]
        bus_id = values[3]
        gpus.append(
            GpuInfo(
                index=to_int(values[0]),
                uuid=values[1],
                name=values[2],
                pci_bus_id=bus_id,
                pci_address=normalize_pci_address(bus_id) if bus_id else None,
                driver_version=values[4],
                persistence_mode=yes_no(values[5]),
                memory_total_mib=to_int(values[6]),
                ecc_uncorrected_volatile=to_int(values[7]),
                pcie_link_width_current=to_int(values[8]),
                pcie_link_width_max=to_int(values[9]),
                mig_mode_current=values[10],
                mig_mode_pending=values[11],
            )
        )
    return NvidiaSmiGpuInfo(**status, gpus=gpus)


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


# --------------------------------------------------------------------------- remapped rows

REMAPPED_ROWS_FIELDS: tuple[str, ...] = (
    "gpu_bus_id",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)


class RemappedRows(TypedDict):
    """Row-remapping state of one GPU (Ampere and later)."""

    pci_bus_id: str
    pci_address: str
    correctable: int | None
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None


class RemappedRowsInfo(NvidiaSmiStatus):
    """Result of :class:`NvidiaRemappedRows`."""

    gpus: list[RemappedRows]


def parse_remapped_rows(lines: list[str]) -> RemappedRowsInfo:
    """Parse ``nvidia-smi --query-remapped-rows=<REMAPPED_ROWS_FIELDS> --format=csv,noheader,nounits``."""
    status, data = _smi_status(lines)
    gpus: list[RemappedRows] = []
    for line in data:
        cells = split_csv(line)
        if len(cells) != len(REMAPPED_ROWS_FIELDS) or ":" not in cells[0]:
            if line.strip():
                status["messages"].append(line.strip())
            continue
        gpus.append(
            RemappedRows(
                pci_bus_id=cells[0],
                pci_address=normalize_pci_address(cells[0]),
                correctable=to_int(cells[1]),
                uncorrectable=to_int(cells[2]),
                pending=yes_no(cells[3]),
                failure=yes_no(cells[4]),
            )
        )
    return RemappedRowsInfo(**status, gpus=gpus)


# --------------------------------------------------------------------------- NVLink


class NvlinkLink(TypedDict):
    """State of one NVLink."""

    link: int
    active: bool
    speed_gbps: float | None
    raw: str


class NvlinkGpu(TypedDict):
    """NVLinks of one GPU."""

    index: int
    name: str
    uuid: str | None
    links: list[NvlinkLink]
    notes: list[str]


class NvlinkInfo(NvidiaSmiStatus):
    """Result of :class:`NvlinkStatus`."""

    gpus: list[NvlinkGpu]
    inactive_links: int


_GPU_HEADER_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?)(?: \(UUID: (?P<uuid>[^)]+)\))?\s*$")
_LINK_RE = re.compile(r"^\s*Link (?P<link>\d+): (?P<value>.*?)\s*$")
_SPEED_RE = re.compile(r"^(?P<speed>\d+(?:\.\d+)?) GB/s$")


def parse_nvlink_status(lines: list[str]) -> NvlinkInfo:
    """Parse ``nvidia-smi nvlink -s`` (per GPU: ``Link N: <speed> GB/s`` or ``<inactive>``)."""
    status, data = _smi_status(lines)
    gpus: list[NvlinkGpu] = []
    inactive = 0
    for line in data:
        header = _GPU_HEADER_RE.match(line)
        if header:
            gpus.append(
                NvlinkGpu(
                    index=int(header.group("index")),
                    name=header.group("name"),
                    uuid=header.group("uuid"),
                    links=[],
                    notes=[],
                )
            )
            continue
        link = _LINK_RE.match(line)
        if link and gpus:
            value = link.group("value")
            speed = _SPEED_RE.match(value)
            active = speed is not None
            if not active:
                inactive += 1
            gpus[-1]["links"].append(
                NvlinkLink(
                    link=int(link.group("link")),
                    active=active,
                    speed_gbps=float(speed.group("speed")) if speed else None,
                    raw=value,
                )
            )
        elif line.strip():
            if gpus:
                gpus[-1]["notes"].append(line.strip())
            else:
                status["messages"].append(line.strip())
    return NvlinkInfo(**status, gpus=gpus, inactive_links=inactive)


# --------------------------------------------------------------------------- nvidia-smi topo -m


class TopologyInfo(NvidiaSmiStatus):
    """``nvidia-smi topo -m``: how each pair of GPUs is connected (``NV18``, ``SYS``, ``PIX``, ...)
    and each GPU's CPU and NUMA affinity. ``links`` maps ``"GPU0-GPU1"`` (lower index first)."""

    gpus: list[str]
    links: dict[str, str]
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, str]


def parse_topology_matrix(lines: list[str]) -> TopologyInfo:
    """Parse ``nvidia-smi topo -m`` (tab-separated: a header of device columns, then one row per
    device; NIC rows and columns and the legend are read past)."""
    status, body = _smi_status(lines)
    info: TopologyInfo = {**status, "gpus": [], "links": {}, "cpu_affinity": {}, "numa_affinity": {}}
    header: list[str] | None = None
    for line in body:
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            if len(cells) > 1 and cells[0] == "" and cells[1].startswith("GPU"):
                header = cells[1:]
            elif line.strip():
                info["messages"].append(line.strip())
            continue
        if not cells[0].startswith("GPU") or not cells[0][3:].isdigit():
            continue  # NIC rows, the blank line and the legend
        row, values = cells[0], cells[1:]
        info["gpus"].append(row)
        for column, value in zip(header, values, strict=False):
            if column.startswith("GPU") and column[3:].isdigit() and column != row:
                pair = "-".join(sorted((row, column), key=lambda g: int(g[3:])))
                info["links"][pair] = value
            elif column == "CPU Affinity":
                info["cpu_affinity"][row] = value
            elif column == "NUMA Affinity":
                info["numa_affinity"][row] = value
    return info


# --------------------------------------------------------------------------- Xid errors


class XidEvent(TypedDict):
    """One ``NVRM: Xid`` kernel log line.

    ``pci_address`` gets function ``.0`` appended (the log omits it; GPUs are function 0) so it
    joins with :class:`NvidiaSmiGpus` ``pci_address``.
    """

    code: int
    pci_address: str
    pid: int | None
    process_name: str | None
    message: str
    serious: bool
    timestamp: str | None
    raw: str


class XidInfo(TypedDict):
    """Result of :class:`XidErrors`."""

    source: str | None
    events: list[XidEvent]
    codes: list[int]
    serious_codes: list[int]


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
        serious=code in SERIOUS_XIDS,
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
    codes = sorted({event["code"] for event in events})
    return XidInfo(
        source=source,
        events=events,
        codes=codes,
        serious_codes=[code for code in codes if code in SERIOUS_XIDS],
    )


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

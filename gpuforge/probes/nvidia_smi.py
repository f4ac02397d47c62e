"""nvidia-smi readings: the GPU inventory query, remapped rows, NVLink state and GPU topology.

Every reading runs ``nvidia-smi`` through :func:`gpuforge.probes._common.guarded`, so a missing
binary, a failing driver (exit 9) or a hung GPU (the node program's ``__timeout=``) is reported in
the parsed value (``available``, ``rc``, ``error``), never raised.
"""

from __future__ import annotations

import re
from typing import TypedDict

from gpuforge.probes._common import guarded, na_to_none, normalize_pci_address, split_csv, split_guarded, to_int, yes_no
from gpuforge.probes.reading import Reading

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


class NvidiaSmiStatus(TypedDict):
    """How an nvidia-smi command went."""

    available: bool
    rc: int | None
    error: str | None
    messages: list[str]


def explain_nvidia_smi_rc(rc: int | None, available: bool = True, timeout: str | None = None) -> str | None:
    """Human explanation of how nvidia-smi ended; None for success."""
    if not available:
        return "nvidia-smi not found (NVIDIA driver utilities not installed)"
    if timeout is not None:
        return f"nvidia-smi did not answer within {timeout} s (hung driver or GPU)"
    if rc is None or rc == 0:
        return None
    return f"nvidia-smi exit code {rc}: {NVIDIA_SMI_EXIT_CODES.get(rc, 'unknown error')}"


def smi_status(lines: list[str]) -> tuple[NvidiaSmiStatus, list[str]]:
    """How an nvidia-smi command went, and its data lines."""
    out = split_guarded(lines)
    status = NvidiaSmiStatus(
        available=out.available,
        rc=out.rc,
        error=explain_nvidia_smi_rc(out.rc, out.available, out.timeout),
        messages=[],
    )
    return status, out.lines


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
    """What :data:`GPU_QUERY` reads."""

    gpus: list[GpuInfo]


def parse_gpu_query(lines: list[str]) -> NvidiaSmiGpuInfo:
    """Parse ``nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits``."""
    status, data = smi_status(lines)
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
    """What :data:`REMAPPED_ROWS` reads."""

    gpus: list[RemappedRows]


def parse_remapped_rows(lines: list[str]) -> RemappedRowsInfo:
    """Parse ``nvidia-smi --query-remapped-rows=<REMAPPED_ROWS_FIELDS> --format=csv,noheader,nounits``."""
    status, data = smi_status(lines)
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
    """What :data:`NVLINK_STATUS` reads."""

    gpus: list[NvlinkGpu]
    inactive_links: int


_GPU_HEADER_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?)(?: \(UUID: (?P<uuid>[^)]+)\))?\s*$")
_LINK_RE = re.compile(r"^\s*Link (?P<link>\d+): (?P<value>.*?)\s*$")
_SPEED_RE = re.compile(r"^(?P<speed>\d+(?:\.\d+)?) GB/s$")


def parse_nvlink_status(lines: list[str]) -> NvlinkInfo:
    """Parse ``nvidia-smi nvlink -s`` (per GPU: ``Link N: <speed> GB/s`` or ``<inactive>``)."""
    status, data = smi_status(lines)
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
    status, body = smi_status(lines)
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


# --------------------------------------------------------------------------- readings


def _smi(arguments: str) -> str:
    return guarded("nvidia-smi", f"nvidia-smi {arguments}")


GPU_QUERY: Reading[NvidiaSmiGpuInfo] = Reading(
    "nvidia.gpu_query",
    lambda: _smi(f"--query-gpu={','.join(GPU_QUERY_FIELDS)} --format=csv,noheader,nounits"),
    parse_gpu_query,
)
REMAPPED_ROWS: Reading[RemappedRowsInfo] = Reading(
    "nvidia.remapped_rows",
    lambda: _smi(f"--query-remapped-rows={','.join(REMAPPED_ROWS_FIELDS)} --format=csv,noheader,nounits"),
    parse_remapped_rows,
)
NVLINK_STATUS: Reading[NvlinkInfo] = Reading("nvidia.nvlink_status", lambda: _smi("nvlink -s"), parse_nvlink_status)
GPU_TOPOLOGY: Reading[TopologyInfo] = Reading("nvidia.topology", lambda: _smi("topo -m"), parse_topology_matrix)

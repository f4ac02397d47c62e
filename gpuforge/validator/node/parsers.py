"""Reading probe output: thin adapters over ``gpuforge.probes`` (the deploy facts' parsers)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.probes import nvidia as nvidia_probe
from gpuforge.probes.nvidia_host import NVSWITCH_DEVICE_IDS
from gpuforge.probes.systemd import parse_systemctl_show
from gpuforge.validator.node.probing import (
    GPU_QUERY_FIELDS,
    MISSING_MARKER,
    NVIDIA_SMI_EXIT_CODES,
    REMAPPED_ROWS_FIELDS,
)


@dataclass
class Marked:
    """Data lines of a probe and its markers."""

    lines: list[str]
    rc: int | None = None
    missing: str | None = None
    timeout: str | None = None
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.missing is None and self.timeout is None and self.rc in (0, None)


_MARKER_RE = re.compile(r"^__([a-z0-9_]+)=(.*)$")


def split_markers(lines: Iterable[str]) -> Marked:
    """Separate ``__key=value`` marker lines from data lines."""
    out = Marked(lines=[])
    for line in lines:
        m = _MARKER_RE.match(line)
        if not m:
            out.lines.append(line)
            continue
        key, value = m.group(1), m.group(2)
        if key == "rc":
            out.rc = _int(value)
        elif key == "missing":
            out.missing = value.strip() or "unknown"
        elif key == "timeout":
            out.timeout = value
        else:
            out.markers[key] = value
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


_NA = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"}


def _na(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _NA else value


def _yes(value: str) -> bool | None:
    v = (_na(value) or "").lower()
    if v in {"yes", "enabled", "true", "on", "1"}:
        return True
    if v in {"no", "disabled", "false", "off", "0"}:
        return False
    return None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split(",")]


def pci_address(addr: str) -> str:
    """``00000000:0D:00.0`` / ``0d:00.0`` -> ``0000:0d:00.0``."""
    parts = addr.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) == 3:
        return f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2]}"
    return addr.strip().lower()


_LSPCI_RE = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<cname>.+?)\s+"
    r"\[(?P<cls>[0-9a-fA-F]{4})\]:\s+(?P<desc>.*?)\s*\[10de:(?P<dev>[0-9a-fA-F]{4})\]"
)


@dataclass
class PciInfo:
    """NVIDIA GPUs and NVSwitches on the bus."""

    source: str
    available: bool
    gpus: list[tuple[str, str, str]] = field(default_factory=list)  # (address, device id, description)
    nvswitches: list[str] = field(default_factory=list)


def _pci_kind(cls: str, dev: str, desc: str) -> str:
    if cls in nvidia_probe.GPU_PCI_CLASSES:
        return "gpu"
    if dev in NVSWITCH_DEVICE_IDS or "nvswitch" in desc.lower() or cls == "0680":
        return "nvswitch"
    return "other"


def parse_lspci(lines: Sequence[str]) -> PciInfo:
    """``lspci -Dnn -d 10de:`` -> GPUs and NVSwitches."""
    m = split_markers(lines)
    info = PciInfo("lspci -d 10de:", available=m.missing is None and m.timeout is None)
    for line in m.lines:
        match = _LSPCI_RE.match(line.strip())
        if not match:
            continue
        cls, dev, desc = match.group("cls").lower(), match.group("dev").lower(), match.group("desc")
        kind = _pci_kind(cls, dev, desc)
        if kind == "gpu":
            info.gpus.append((pci_address(match.group("addr")), dev, desc))
        elif kind == "nvswitch":
            info.nvswitches.append(pci_address(match.group("addr")))
    return info


def parse_sysfs_pci(lines: Sequence[str]) -> PciInfo:
    """``<address> <class> <device>`` lines from :func:`_read_sysfs_pci`."""
    m = split_markers(lines)
    info = PciInfo("/sys/bus/pci/devices", available="error" not in m.markers)
    for line in m.lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        addr, klass, device = parts
        cls = klass.lower().removeprefix("0x")[:4]
        dev = device.lower().removeprefix("0x")
        kind = _pci_kind(cls, dev, "")
        if kind == "gpu":
            info.gpus.append((pci_address(addr), dev, f"10de:{dev}"))
        elif kind == "nvswitch":
            info.nvswitches.append(pci_address(addr))
    return info


@dataclass
class SmiGpu:
    """One GPU from ``nvidia-smi --query-gpu``."""

    index: int
    name: str
    address: str
    driver_version: str | None
    persistence: bool | None
    ecc_uncorrected: int | None
    width_current: int | None
    width_max: int | None
    mig_current: str | None


@dataclass
class SmiInfo:
    """``nvidia-smi --query-gpu`` result."""

    available: bool
    rc: int | None
    timeout: bool
    gpus: list[SmiGpu]
    messages: list[str]

    @property
    def error(self) -> str | None:
        if not self.available:
            return "nvidia-smi not found (NVIDIA driver utilities not installed)"
        if self.timeout:
            return "nvidia-smi did not answer within its time limit (hung driver or GPU)"
        if self.rc not in (None, 0):
            return explain_smi_rc(self.rc)
        return None


def explain_smi_rc(rc: int | None) -> str | None:
    """``nvidia-smi exit code 9: NVIDIA driver is not loaded ...``; None for success."""
    if rc in (None, 0):
        return None
    return f"nvidia-smi exit code {rc}: {NVIDIA_SMI_EXIT_CODES.get(int(rc or 0), 'unknown error')}"


def parse_gpu_query(lines: Sequence[str]) -> SmiInfo:
    """``nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits``."""
    m = split_markers(lines)
    gpus: list[SmiGpu] = []
    messages: list[str] = []
    for line in m.lines:
        cells = _cells(line)
        if len(cells) != len(GPU_QUERY_FIELDS) or _int(cells[0]) is None:
            if line.strip():
                messages.append(line.strip())
            continue
        gpus.append(
            SmiGpu(
                index=int(cells[0]),
                name=cells[2],
                address=pci_address(cells[3]) if _na(cells[3]) else "",
                driver_version=_na(cells[4]),
                persistence=_yes(cells[5]),
                ecc_uncorrected=_int(_na(cells[7])),
                width_current=_int(_na(cells[8])),
                width_max=_int(_na(cells[9])),
                mig_current=_na(cells[10]),
            )
        )
    return SmiInfo(m.missing is None, m.rc, m.timeout is not None, gpus, messages)


@dataclass
class RemappedRows:
    """Row-remapping flags of one GPU (None: not supported)."""

    address: str
    uncorrectable: int | None
    pending: bool | None
    failure: bool | None


def parse_remapped_rows(lines: Sequence[str]) -> tuple[Marked, list[RemappedRows]]:
    """``nvidia-smi --query-remapped-rows=<REMAPPED_ROWS_FIELDS> --format=csv,noheader,nounits``."""
    m = split_markers(lines)
    rows = []
    for line in m.lines:
        cells = _cells(line)
        if len(cells) != len(REMAPPED_ROWS_FIELDS) or ":" not in cells[0]:
            continue
        rows.append(RemappedRows(pci_address(cells[0]), _int(_na(cells[2])), _yes(cells[3]), _yes(cells[4])))
    return m, rows


@dataclass
class NvlinkGpu:
    """Active and inactive NVLinks of one GPU."""

    index: int
    name: str
    active: int = 0
    inactive: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_NVL_GPU_RE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?\s*$")
_NVL_LINK_RE = re.compile(r"^\s*Link (\d+): (.*?)\s*$")


def parse_nvlink(lines: Sequence[str]) -> tuple[Marked, list[NvlinkGpu]]:
    """``nvidia-smi nvlink -s``: ``Link N: <speed> GB/s`` is active, anything else is not."""
    m = split_markers(lines)
    gpus: list[NvlinkGpu] = []
    for line in m.lines:
        header = _NVL_GPU_RE.match(line)
        if header:
            gpus.append(NvlinkGpu(int(header.group(1)), header.group(2)))
            continue
        link = _NVL_LINK_RE.match(line)
        if link and gpus:
            if re.match(r"^\d+(\.\d+)? GB/s$", link.group(2)):
                gpus[-1].active += 1
            else:
                gpus[-1].inactive.append(int(link.group(1)))
        elif line.strip() and gpus:
            gpus[-1].notes.append(line.strip())
    return m, gpus


def parse_xid(lines: Sequence[str]) -> tuple[str | None, list[tuple[int, str, str]]]:
    """Kernel-log Xid events as ``(code, pci address, message)``; the log source (None: unreadable)."""
    info = nvidia_probe.parse_xid_errors(list(lines))
    return info["source"], [(e["code"], e["pci_address"], e["message"]) for e in info["events"]]


def parse_modules(lines: Sequence[str]) -> tuple[bool, set[str]]:
    """``/proc/modules``: (readable, loaded module names)."""
    info = nvidia_probe.parse_proc_modules(list(lines))
    return info["readable"], set(info["modules"])


def parse_driver(lines: Sequence[str]) -> tuple[bool, str | None]:
    """``/proc/driver/nvidia/version`` + sysfs markers: (loaded, version)."""
    info = nvidia_probe.parse_driver_version(list(lines))
    return info["loaded"], info["version"]


def parse_units(lines: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``systemctl show -p ...`` states keyed by the names in the ``__units=`` marker."""
    return {name: dict(state) for name, state in parse_systemctl_show(list(lines))["units"].items() if state}


def parse_file(lines: Sequence[str]) -> dict[str, Any] | None:
    """The FileDigests format for one path: mode, owner, group, type, sha256 (None: missing)."""
    info: dict[str, Any] | None = None
    for line in lines:
        if line.startswith(MISSING_MARKER):
            return None
        if line.startswith("__file="):
            info = {"path": line.split("=", 1)[1]}
        elif info is not None and line.startswith("__error="):
            info["error"] = line.split("=", 1)[1]
        elif info is not None and line.startswith("__stat="):
            parts = line.split("=", 1)[1].split("|", 4)
            if len(parts) == 5:
                info.update(mode=parts[0].rjust(4, "0"), owner=parts[1], group=parts[2], type=parts[3])
        elif info is not None and line.startswith("__sha256="):
            info["sha256"] = line.split("=", 1)[1].strip().lower() or None
    return info


def metric_names(lines: Sequence[str]) -> set[str]:
    """Metric names of a Prometheus text exposition."""
    names = set()
    for line in lines:
        match = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})?\s+\S+", line)
        if match and not line.startswith("#"):
            names.add(match.group(1))
    return names


def parse_diag_json(lines: Sequence[str]) -> tuple[str | None, list[str], str | None]:
    """``dcgmi diag -j``: (overall pass/fail/warn/skip or None, failing tests, error)."""
    m = split_markers(lines)
    start = next((i for i, line in enumerate(m.lines) if line.lstrip().startswith("{")), None)
    if start is None:
        text = "; ".join(line.strip() for line in m.lines if line.strip())
        return None, [], text or "no JSON output from dcgmi"
    try:
        data = json.loads("\n".join(m.lines[start:]))
    except ValueError as e:
        return None, [], f"invalid JSON from dcgmi: {e}"
    root = data.get("DCGM GPU Diagnostic") or data.get("DCGM Diagnostic") or data if isinstance(data, dict) else {}
    error = root.get("runtime_error") if isinstance(root, dict) else None
    statuses: list[str] = []
    failing: list[str] = []
    for category in (root.get("test_categories") or []) if isinstance(root, dict) else []:
        for test in category.get("tests") or [] if isinstance(category, dict) else []:
            if not isinstance(test, dict):
                continue
            results = [r for r in test.get("results") or [] if isinstance(r, dict)]
            summary = test.get("test_summary")
            found = [str(r.get("status", "")).lower() for r in results]
            if isinstance(summary, dict) and summary.get("status"):
                found = [str(summary["status"]).lower()]
            statuses.extend(found)
            if any(s.startswith("fail") for s in found):
                failing.append(str(test.get("name") or test.get("test_name") or "?"))
    overall = None
    for status in ("fail", "warn", "pass", "skip"):
        if any(s.startswith(status) for s in statuses):
            overall = status
            break
    return overall, failing, (str(error) if error else None)

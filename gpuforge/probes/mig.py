"""MIG readings: MIG mode per GPU, MIG devices (``nvidia-smi -L``), the GPU instance profiles a GPU
offers (``nvidia-smi mig -lgip``) and whether a mig-parted layout is applied."""

from __future__ import annotations

import re
import shlex
from typing import TypedDict

from gpuforge.probes._common import guarded, na_to_none, split_csv, split_guarded, to_int
from gpuforge.probes.nvidia_smi import NvidiaSmiStatus, explain_nvidia_smi_rc, smi_status
from gpuforge.probes.reading import Reading

# --------------------------------------------------------------------------- MIG mode

MIG_MODE_FIELDS: tuple[str, ...] = ("index", "name", "mig.mode.current", "mig.mode.pending")


class MigModeGpu(TypedDict):
    """MIG mode of one GPU; ``current``/``pending`` are None when MIG is not supported."""

    index: int
    name: str
    current: str | None
    pending: str | None
    change_pending: bool


class MigModeInfo(NvidiaSmiStatus):
    """What :data:`MIG_MODE` reads."""

    gpus: list[MigModeGpu]


def parse_mig_mode(lines: list[str]) -> MigModeInfo:
    """Parse ``nvidia-smi --query-gpu=index,name,mig.mode.current,mig.mode.pending --format=csv,noheader``."""
    out = split_guarded(lines)
    info = MigModeInfo(
        available=out.available,
        rc=out.rc,
        error=explain_nvidia_smi_rc(out.rc, out.available, out.timeout),
        messages=[],
        gpus=[],
    )
    for line in out.lines:
        cells = split_csv(line)
        index = to_int(cells[0]) if cells else None
        if len(cells) != len(MIG_MODE_FIELDS) or index is None:
            if line.strip():
                info["messages"].append(line.strip())
            continue
        current, pending = na_to_none(cells[2]), na_to_none(cells[3])
        info["gpus"].append(
            MigModeGpu(
                index=index,
                name=cells[1],
                current=current,
                pending=pending,
                change_pending=current is not None and pending is not None and current != pending,
            )
        )
    return info


# --------------------------------------------------------------------------- MIG devices (nvidia-smi -L)


class MigDevice(TypedDict):
    """One MIG device listed under its parent GPU."""

    profile: str
    device: int
    uuid: str


class ListedGpu(TypedDict):
    """One GPU from ``nvidia-smi -L`` with its MIG devices."""

    index: int
    name: str
    uuid: str | None
    mig_devices: list[MigDevice]


class MigDevicesInfo(NvidiaSmiStatus):
    """What :data:`MIG_DEVICES` reads."""

    gpus: list[ListedGpu]


_L_GPU_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?)(?: \(UUID: (?P<uuid>[^)]+)\))?\s*$")
_L_MIG_RE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>[^)]+)\)\s*$")


def parse_nvidia_smi_list(lines: list[str]) -> MigDevicesInfo:
    """Parse ``nvidia-smi -L``: ``GPU n: name (UUID: ...)`` and indented ``MIG <profile> Device n`` lines."""
    out = split_guarded(lines)
    info = MigDevicesInfo(
        available=out.available,
        rc=out.rc,
        error=explain_nvidia_smi_rc(out.rc, out.available, out.timeout),
        messages=[],
        gpus=[],
    )
    for line in out.lines:
        gpu = _L_GPU_RE.match(line)
        if gpu:
            info["gpus"].append(
                ListedGpu(
                    index=int(gpu.group("index")),
                    name=gpu.group("name"),
                    uuid=gpu.group("uuid"),
                    mig_devices=[],
                )
            )
            continue
        mig = _L_MIG_RE.match(line)
        if mig and info["gpus"]:
            info["gpus"][-1]["mig_devices"].append(
                MigDevice(profile=mig.group("profile"), device=int(mig.group("device")), uuid=mig.group("uuid"))
            )
        elif line.strip():
            info["messages"].append(line.strip())
    return info


# --------------------------------------------------------------------------- GPU instance profiles


class GpuInstanceProfile(TypedDict):
    """One row of ``nvidia-smi mig -lgip``: a profile a GPU offers, and how many are free."""

    gpu: int
    name: str  # without the "MIG " prefix: 1g.10gb, 1g.12gb+me, ...
    id: int
    free: int
    total: int
    memory_gib: float


class GpuInstanceProfilesInfo(NvidiaSmiStatus):
    """What :data:`MIG_PROFILES` reads; ``profiles`` is empty when no GPU has MIG on."""

    profiles: list[GpuInstanceProfile]


#: ``|   0  MIG 1g.12gb       19     7/7        10.75      No     16     1     0   |`` (the row's
#: second line, CE/JPEG/OFA, carries no profile name and is skipped).
_LGIP_RE = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+(?P<mem>[\d.]+)\s"
)


def parse_mig_lgip(lines: list[str]) -> GpuInstanceProfilesInfo:
    """Parse ``nvidia-smi mig -lgip`` (the GPU instance profiles table, every MIG-enabled GPU)."""
    status, body = smi_status(lines)
    info: GpuInstanceProfilesInfo = {**status, "profiles": []}
    for line in body:
        row = _LGIP_RE.match(line)
        if row:
            info["profiles"].append(
                GpuInstanceProfile(
                    gpu=int(row.group("gpu")),
                    name=row.group("name"),
                    id=int(row.group("id")),
                    free=int(row.group("free")),
                    total=int(row.group("total")),
                    memory_gib=float(row.group("mem")),
                )
            )
        elif line.strip() and not line.lstrip().startswith(("+", "|")):
            info["messages"].append(line.strip())  # e.g. "No MIG-enabled devices found."
    return info


# --------------------------------------------------------------------------- mig-parted assert


class MigPartedAssertInfo(TypedDict):
    """Whether the named mig-parted configuration is currently applied."""

    available: bool
    applied: bool | None
    rc: int | None
    message: str | None
    output: list[str]


_LOGRUS_TEXT_RE = re.compile(r'level=(?P<level>\w+) msg="(?P<msg>(?:[^"\\]|\\.)*)"')
_LOGRUS_TTY_RE = re.compile(r"^(?P<level>[A-Z]{4})\[\d+\]\s*(?P<msg>.*?)\s*$")


def _logrus_message(line: str) -> tuple[str | None, str]:
    """Split a logrus line (``level=fatal msg="..."`` or ``FATA[0000] ...``) into level and text."""
    match = _LOGRUS_TEXT_RE.search(line)
    if match:
        return match.group("level").lower(), match.group("msg").replace('\\"', '"')
    match = _LOGRUS_TTY_RE.match(line)
    if match:
        return match.group("level").lower(), match.group("msg")
    return None, line.strip()


def parse_mig_parted_assert(lines: list[str]) -> MigPartedAssertInfo:
    """Parse ``nvidia-mig-parted assert`` output: exit 0 means applied; the last error line explains why not."""
    out = split_guarded(lines)
    text = [line.rstrip() for line in out.lines if line.strip()]
    message: str | None = None
    for line in text:
        level, msg = _logrus_message(line)
        if level in {"fata", "fatal", "erro", "error", "panic"} or (level is None and message is None):
            message = msg
    if not out.available:
        message = "nvidia-mig-parted not found"
    elif out.timeout is not None:
        message = f"nvidia-mig-parted assert did not finish within {out.timeout} s"
    applied = None if not out.available or out.timeout is not None or out.rc is None else out.rc == 0
    return MigPartedAssertInfo(available=out.available, applied=applied, rc=out.rc, message=message, output=text)


# --------------------------------------------------------------------------- readings


def mig_parted_assert_command(config_file: str, config_name: str) -> str:
    body = f"nvidia-mig-parted assert -f {shlex.quote(config_file)} -c {shlex.quote(config_name)}"
    return guarded("nvidia-mig-parted", body)


MIG_MODE: Reading[MigModeInfo] = Reading(
    "mig.mode",
    lambda: guarded("nvidia-smi", f"nvidia-smi --query-gpu={','.join(MIG_MODE_FIELDS)} --format=csv,noheader"),
    parse_mig_mode,
)
MIG_DEVICES: Reading[MigDevicesInfo] = Reading(
    "mig.devices", lambda: guarded("nvidia-smi", "nvidia-smi -L"), parse_nvidia_smi_list
)
MIG_PROFILES: Reading[GpuInstanceProfilesInfo] = Reading(
    "mig.profiles", lambda: guarded("nvidia-smi", "nvidia-smi mig -lgip"), parse_mig_lgip
)
#: Read-only: exit 0 when the named layout is applied. It asks every GPU, hence its longer time.
MIG_PARTED_ASSERT: Reading[MigPartedAssertInfo] = Reading(
    "mig.parted_assert", mig_parted_assert_command, parse_mig_parted_assert, timeout_s=30.0
)

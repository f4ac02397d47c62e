#!/usr/bin/env python3
"""gpuforge node health check: the checks that run ON a node.

Built with the probes it imports into one file (``gpuforge.render.node_program``), the Slurm
deploy installs it as ``/usr/local/sbin/gpuforge-health`` with its
configuration in ``/etc/gpuforge/health.json`` (written from the cluster spec by
``gpuforge.render.health.health_config``); ``gpuforge validate`` sends the same file
the same program over SSH (``python3 - --validate --json``), so a node answers both alike.

Rules:

* Python standard library and ``gpuforge.probes`` only (nodes have no gpuforge installed; the
  program carries the probes it uses, see tests/validator/test_node_program.py).
* A check either runs and passes or fails, is skipped with a reason (it does not apply to
  this node), or is blocked (a check it depends on did not pass). Nothing passes that did
  not run.
* Probes (commands, files, sysfs, HTTP) print the same ``__rc=``/``__missing=`` markers as
  the gpuforge facts, so the small parsers here are tested against the facts' fixtures.
* In Slurm mode (``--slurm``, or when slurmd runs it as HealthCheckProgram) a node with a
  failing critical check is drained with a ``gpuforge: health: ...`` reason, and a node drained
  with that tag is resumed once everything passes. A node drained by anyone else (an operator,
  or gpuforge's own rolling apply) is left alone.

Exit status: 0 all passed (skips allowed), 1 a check failed, 2 could not run (bad config).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuforge.probes import nvidia as nvidia_probe
from gpuforge.probes.nvidia import SERIOUS_XIDS
from gpuforge.probes.nvidia_host import NVSWITCH_DEVICE_IDS
from gpuforge.probes.systemd import UNIT_PROPERTIES, parse_systemctl_show

SCHEMA_VERSION = 1
DEFAULT_CONFIG = "/etc/gpuforge/health.json"
#: Drain reasons of this program. Other gpuforge drains ("gpuforge: rolling change") are not ours.
REASON_TAG = "gpuforge: health:"
MAX_REASON = 200

PASS, FAIL, SKIP, BLOCKED = "pass", "fail", "skip", "blocked"
STATUSES = (PASS, FAIL, SKIP, BLOCKED)
LAYERS = ("connection", "hardware", "driver", "toolkit", "container", "scheduler", "job", "monitoring", "security")
CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITIES = (CRITICAL, WARNING, INFO)

Config = dict[str, Any]
Outcome = tuple[str, str]

# --------------------------------------------------------------------------- markers and probes

RC_MARKER = "__rc="
MISSING_MARKER = "__missing="
TIMEOUT_MARKER = "__timeout="

#: nvidia-smi exit codes (``man nvidia-smi``, RETURN VALUE).
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

#: Xid codes that mean a hardware or driver fault (drain, reset or RMA).
XID_MEANING = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
GPU_QUERY_FIELDS = (
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
REMAPPED_ROWS_FIELDS = (
    "gpu_bus_id",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
PROBE_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def guarded(binary: str, body: str) -> str:
    """``body`` (stderr merged) if ``binary`` exists, else ``__missing=<binary>``; always exits 0."""
    return (
        f"if command -v {binary} >/dev/null 2>&1; "
        f'then {body} 2>&1; echo "{RC_MARKER}$?"; '
        f'else echo "{MISSING_MARKER}{binary}"; fi'
    )


def quote(value: str) -> str:
    """Shell-quote one word (``shlex.quote``)."""
    if value and re.fullmatch(r"[\w@%+=:,./-]+", value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


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


def units_for(cfg: Config) -> list[str]:
    """systemd units whose state the checks of this node read."""
    units: list[str] = []
    slurm = cfg.get("slurm") or {}
    if slurm:
        units.append("munge.service")
        if slurm.get("compute"):
            units.append("slurmd.service")
        if slurm.get("controller"):
            units.append("slurmctld.service")
        if slurm.get("accounting_db"):
            units += ["slurmdbd.service", "mariadb.service"]
    if (cfg.get("gpu") or {}).get("nvswitch"):
        units.append("nvidia-fabricmanager.service")
    if cfg.get("kubernetes"):
        units.append("kubelet.service")
    return units or ["gpuforge-none.service"]


def _units_command(cfg: Config) -> str:
    names = " ".join(units_for(cfg))
    return f"echo '__units={names}'; systemctl show -p {','.join(UNIT_PROPERTIES)} {names} 2>&1; echo \"__rc=$?\""


def _mig_command(cfg: Config) -> str:
    mig = cfg.get("mig") or {}
    body = f"nvidia-mig-parted assert -f {quote(str(mig.get('file', '')))} -c {quote(str(mig.get('config', '')))}"
    return guarded("nvidia-mig-parted", body)


def _diag_command(cfg: Config) -> str:
    level = int((cfg.get("dcgm") or {}).get("diag_level") or 1)
    return guarded("dcgmi", f"dcgmi diag -r {level} -j")


def _container_command(cfg: Config) -> str:
    image = str((cfg.get("container") or {}).get("test_image") or "")
    engine = str((cfg.get("container") or {}).get("engine") or "none")
    run = ""
    if image and engine == "docker":
        run = (
            f"if docker image inspect {quote(image)} >/dev/null 2>&1; then echo '__mode=docker'; "
            f'docker run --rm --gpus all {quote(image)} nvidia-smi -L 2>&1; echo "__rc=$?"; exit 0; fi; '
        )
    elif image and engine == "containerd":
        run = (
            f"if ctr -n default images ls -q 2>/dev/null | grep -Fxq {quote(image)}; then echo '__mode=ctr'; "
            f"ctr -n default run --rm --gpus 0 {quote(image)} gpuforge-validate nvidia-smi -L 2>&1; "
            'echo "__rc=$?"; exit 0; fi; '
        )
    return run + "echo '__mode=cli'; " + guarded("nvidia-container-cli", "nvidia-container-cli info")


@dataclass(frozen=True)
class Probe:
    """One thing read from the node: a shell command (``sh``) or a Python reader (``py``)."""

    key: str
    sh: Callable[[Config], str] | None = None
    py: Callable[[Config], list[str]] | None = None
    timeout: Callable[[Config], float] = lambda cfg: 8.0
    cheap: bool = True
    """Cheap probes are read up front, in parallel; the others only when their check runs."""


def _read_sysfs_pci(cfg: Config) -> list[str]:
    """``<address> <class> <device>`` per NVIDIA PCI function from sysfs (no lspci needed)."""
    root = str(cfg.get("_sysfs_pci") or "/sys/bus/pci/devices")
    try:
        entries = sorted(os.listdir(root))
    except OSError as e:
        return [f"__error={e.strerror}", "__rc=1"]
    lines = []
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "vendor")) as f:
                vendor = f.read().strip().lower()
            if vendor != "0x10de":
                continue
            with open(os.path.join(root, entry, "class")) as f:
                klass = f.read().strip().lower()
            with open(os.path.join(root, entry, "device")) as f:
                device = f.read().strip().lower()
        except OSError:
            continue
        lines.append(f"{entry} {klass} {device}")
    return [*lines, "__rc=0"]


def file_lines(path: str) -> list[str]:
    """A file's state in the FileDigests fact's format (``__file=``, ``__stat=``, ``__sha256=``)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [f"{MISSING_MARKER}{path}"]
    except OSError as e:
        return [f"__file={path}", f"__error={e.strerror}"]
    import grp
    import pwd

    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    kind = (
        "regular file"
        if stat.S_ISREG(st.st_mode)
        else "directory"
        if stat.S_ISDIR(st.st_mode)
        else "symbolic link"
        if stat.S_ISLNK(st.st_mode)
        else "other"
    )
    lines = [f"__file={path}", f"__stat={stat.S_IMODE(st.st_mode):o}|{owner}|{group}|{kind}|{st.st_size}"]
    if stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb") as f:
                lines.append(f"__sha256={hashlib.sha256(f.read()).hexdigest()}")
        except OSError:
            lines.append("__sha256=")
    return lines


def http_lines(url: str, timeout: float = 3.0, limit: int = 4 << 20) -> list[str]:
    """Body lines of an HTTP GET, then ``__rc=0``; ``__error=...`` and ``__rc=1`` when it fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(limit).decode("utf-8", "replace")
        return [*body.splitlines(), "__rc=0"]
    except urllib.error.HTTPError as e:
        return [f"__error=HTTP {e.code} {e.reason}", "__rc=1"]
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return [f"__error={reason}", "__rc=1"]


def _exporter_url(cfg: Config, key: str, default_port: int, field: str = "port") -> str:
    port = int((cfg.get(key) or {}).get(field) or default_port)
    return f"http://127.0.0.1:{port}/metrics"


PROBES: dict[str, Probe] = {
    p.key: p
    for p in (
        Probe("lspci", sh=lambda cfg: guarded("lspci", "lspci -Dnn -d 10de:")),
        Probe("sysfs_pci", py=_read_sysfs_pci),
        Probe(
            "smi",
            sh=lambda cfg: guarded(
                "nvidia-smi", f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} --format=csv,noheader,nounits"
            ),
        ),
        Probe(
            "remapped",
            sh=lambda cfg: guarded(
                "nvidia-smi",
                f"nvidia-smi --query-remapped-rows={','.join(REMAPPED_ROWS_FIELDS)} --format=csv,noheader,nounits",
            ),
        ),
        Probe("nvlink", sh=lambda cfg: guarded("nvidia-smi", "nvidia-smi nvlink -s")),
        Probe("xid", sh=lambda cfg: XID_COMMAND),
        Probe("modules", sh=lambda cfg: 'cat /proc/modules 2>/dev/null; echo "__rc=$?"'),
        Probe("driver", sh=lambda cfg: DRIVER_COMMAND),
        Probe("units", sh=_units_command),
        Probe("munge", sh=lambda cfg: guarded("munge", "munge -n | unmunge")),
        Probe("srun_help", sh=lambda cfg: guarded("srun", "srun --help")),
        Probe("mig", sh=_mig_command, timeout=lambda cfg: 30.0),
        Probe(
            "dcgm_diag",
            sh=_diag_command,
            timeout=lambda cfg: {1: 180.0, 2: 900.0, 3: 3600.0}.get(
                int((cfg.get("dcgm") or {}).get("diag_level") or 1), 7200.0
            ),
            cheap=False,
        ),
        Probe("container", sh=_container_command, timeout=lambda cfg: 120.0, cheap=False),
        Probe("munge_key", py=lambda cfg: file_lines(str((cfg.get("slurm") or {}).get("munge_key") or ""))),
        Probe("slurmdbd_conf", py=lambda cfg: file_lines(str((cfg.get("slurm") or {}).get("slurmdbd_conf") or ""))),
        Probe(
            "containerd_dropin",
            py=lambda cfg: _read_text(str((cfg.get("container") or {}).get("containerd_dropin") or "")),
        ),
        Probe(
            "runtime_config",
            py=lambda cfg: _read_text(str((cfg.get("container") or {}).get("config_file") or "")),
        ),
        Probe("runtime_binary", py=lambda cfg: file_lines(str((cfg.get("container") or {}).get("runtime_bin") or ""))),
        Probe("node_exporter", py=lambda cfg: http_lines(_exporter_url(cfg, "node_exporter", 9100))),
        Probe(
            "dcgm_exporter",
            py=lambda cfg: http_lines(_exporter_url(cfg, "dcgm", 9400, "exporter_port")),
        ),
    )
}


def _read_text(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [*f.read().splitlines(), "__rc=0"]
    except FileNotFoundError:
        return [f"{MISSING_MARKER}{path}"]
    except OSError as e:
        return [f"__error={e.strerror}", "__rc=1"]


def run_shell(command: str, timeout: float) -> list[str]:
    """Run ``command`` with ``/bin/sh``; its output lines, ``__timeout=`` when it ran too long."""
    env = dict(os.environ)
    env["PATH"] = (env["PATH"] + ":" if env.get("PATH") else "") + PROBE_ENV_PATH
    env["LC_ALL"] = "C"
    try:
        cp = subprocess.run(
            ["/bin/sh", "-c", command],
            capture_output=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return [f"{TIMEOUT_MARKER}{timeout:g}"]
    lines = cp.stdout.decode("utf-8", "replace").splitlines()
    if cp.returncode != 0 and not any(line.startswith(RC_MARKER) for line in lines):
        lines += [*cp.stderr.decode("utf-8", "replace").splitlines(), f"{RC_MARKER}{cp.returncode}"]
    return lines


# --------------------------------------------------------------------------- parsers


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
    if cls in ("0300", "0302"):
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


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Check:
    """A registered check: stable id, layer, severity, dependencies and its function."""

    id: str
    layer: str
    severity: str
    description: str
    fn: Callable[..., Outcome]
    depends_on: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    gate: Callable[..., str | None] | None = None
    health: bool = True
    """Part of ``gpuforge health``: fast, and about this node's ability to run jobs (a failure
    drains it). False: ``gpuforge validate`` only (slow, or about cluster services)."""
    scope: str = "node"


@dataclass
class Result:
    """The outcome of one check on one node."""

    id: str
    layer: str
    severity: str
    status: str
    message: str
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(check: Check, gate_reason: str | None, results: dict[str, Result], call: Callable[[], Outcome]) -> Result:
    """Run ``check`` unless it does not apply (skip) or a dependency did not pass (blocked)."""

    def result(status: str, message: str, duration: float = 0.0) -> Result:
        return Result(check.id, check.layer, check.severity, status, message, round(duration, 4))

    if gate_reason:
        return result(SKIP, gate_reason)
    for dep in check.depends_on:
        got = results.get(dep)
        if got is None:
            return result(BLOCKED, f"needs {dep}, which did not run")
        if got.status != PASS:
            return result(BLOCKED, f"{dep} {got.status}: {got.message}"[:300])
    t0 = time.monotonic()
    try:
        status, message = call()
    except Exception as e:  # a crashing check is a failing check, never a pass
        return result(FAIL, f"check crashed: {type(e).__name__}: {e}", time.monotonic() - t0)
    if status not in STATUSES:
        return result(FAIL, f"check returned an unknown status {status!r}: {message}", time.monotonic() - t0)
    return result(status, message, time.monotonic() - t0)


def order_checks(checks: Sequence[Check]) -> list[Check]:
    """Dependencies first, otherwise in registration order; unknown dependencies are ignored here."""
    by_id = {c.id: c for c in checks}
    done: set[str] = set()
    out: list[Check] = []

    def visit(c: Check, stack: tuple[str, ...]) -> None:
        if c.id in done:
            return
        if c.id in stack:
            raise ValueError(f"dependency cycle: {' -> '.join((*stack, c.id))}")
        for dep in c.depends_on:
            if dep in by_id:
                visit(by_id[dep], (*stack, c.id))
        done.add(c.id)
        out.append(c)

    for c in checks:
        visit(c, ())
    return out


def with_dependencies(all_checks: Sequence[Check], wanted: Iterable[str]) -> list[Check]:
    """``wanted`` ids plus everything they depend on, in registration order."""
    by_id = {c.id: c for c in all_checks}
    keep: set[str] = set()
    todo = list(wanted)
    while todo:
        cid = todo.pop()
        if cid in keep or cid not in by_id:
            continue
        keep.add(cid)
        todo.extend(by_id[cid].depends_on)
    return [c for c in all_checks if c.id in keep]


NODE_CHECKS: list[Check] = []


def check(
    id: str,
    layer: str,
    severity: str,
    description: str,
    depends_on: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    gate: Callable[[Config], str | None] | None = None,
    health: bool = True,
) -> Callable[[Callable[[NodeContext], Outcome]], Callable[[NodeContext], Outcome]]:
    """Register a node-local check."""

    def wrap(fn: Callable[[NodeContext], Outcome]) -> Callable[[NodeContext], Outcome]:
        NODE_CHECKS.append(Check(id, layer, severity, description, fn, depends_on, needs, gate, health))
        return fn

    return wrap


class NodeContext:
    """The node's config and its probe outputs (read once, cheap ones in parallel)."""

    def __init__(self, cfg: Config, outputs: dict[str, list[str]] | None = None) -> None:
        self.cfg = cfg
        self.outputs: dict[str, list[str]] = dict(outputs or {})
        self.durations: dict[str, float] = {}
        self.data: dict[str, dict[str, Any]] = {}
        self._charged: set[str] = set()

    def _run(self, key: str) -> list[str]:
        probe = PROBES[key]
        t0 = time.monotonic()
        try:
            if probe.py is not None:
                lines = probe.py(self.cfg)
            else:
                assert probe.sh is not None
                lines = run_shell(probe.sh(self.cfg), probe.timeout(self.cfg))
        except Exception as e:  # a probe that cannot run reports why
            lines = [f"__error={type(e).__name__}: {e}", "__rc=1"]
        self.durations[key] = time.monotonic() - t0
        return lines

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the cheap probes among ``keys`` in parallel."""
        todo = sorted({k for k in keys if k not in self.outputs and k in PROBES and PROBES[k].cheap})
        if not todo:
            return
        with ThreadPoolExecutor(max_workers=min(8, len(todo))) as pool:
            outputs = list(pool.map(self._run, todo))
        for i, key in enumerate(todo):
            self.outputs[key] = outputs[i]

    def out(self, key: str) -> list[str]:
        """A probe's output lines (read now if not yet read)."""
        if key not in self.outputs:
            self.outputs[key] = self._run(key)
        return self.outputs[key]

    def charge(self, keys: Iterable[str]) -> float:
        """Probe time to book on the first check that reads each probe."""
        total = 0.0
        for key in keys:
            if key not in self._charged:
                self._charged.add(key)
                total += self.durations.get(key, 0.0)
        return total

    # -- shared readings

    def pci(self) -> PciInfo:
        """NVIDIA devices on the bus: lspci when installed, else sysfs."""
        info = parse_lspci(self.out("lspci"))
        return info if info.available else parse_sysfs_pci(self.out("sysfs_pci"))

    def smi(self) -> SmiInfo:
        return parse_gpu_query(self.out("smi"))

    def unit(self, name: str) -> dict[str, Any] | None:
        return parse_units(self.out("units")).get(name)


# -- config helpers


def expected_gpus(cfg: Config) -> int:
    return int((cfg.get("gpu") or {}).get("count") or 0)


def _gpu_label(cfg: Config) -> str:
    gpu = cfg.get("gpu") or {}
    return f"{gpu.get('count', 0)} x {gpu.get('model', 'GPU')}"


def _slurm(cfg: Config, role: str | None = None) -> bool:
    slurm = cfg.get("slurm") or {}
    return bool(slurm) and (role is None or bool(slurm.get(role)))


NO_GPU_REASON = "the spec declares no GPUs for this node"


def gate_gpu(cfg: Config) -> str | None:
    """GPU checks apply where the spec declares GPUs."""
    if expected_gpus(cfg) == 0:
        return NO_GPU_REASON
    return None


def no_gpu_reason(ctx: NodeContext) -> str:
    """Why GPU checks are skipped, with what the PCI bus shows."""
    pci = ctx.pci()
    if not pci.available:
        return f"{NO_GPU_REASON} (PCI bus not readable: no lspci, {pci.source} unreadable)"
    if not pci.gpus:
        return f"no NVIDIA device on the PCI bus ({pci.source} lists none) and {NO_GPU_REASON}"
    return f"{NO_GPU_REASON} ({len(pci.gpus)} NVIDIA GPU(s) on the bus: see hardware.gpu_count)"


def _no_bus_note(ctx: NodeContext) -> str:
    pci = ctx.pci()
    if pci.available and not pci.gpus:
        return f"; no NVIDIA GPU on the PCI bus ({pci.source} lists none)"
    return ""


def _unit_state(ctx: NodeContext, unit: str) -> tuple[bool, str]:
    state = ctx.unit(unit)
    if state is None:
        return False, f"{unit}: state unknown (systemctl show gave nothing)"
    if state.get("LoadState") == "not-found":
        return False, f"{unit} is not installed"
    active = state.get("ActiveState") == "active"
    return active, f"{unit} is {state.get('ActiveState')} ({state.get('SubState')})"


# -- hardware


@check(
    "hardware.gpu_count",
    "hardware",
    CRITICAL,
    "NVIDIA GPUs on the PCI bus match the spec (count and model)",
    needs=("lspci",),
)
def _gpu_count(ctx: NodeContext) -> Outcome:
    want = expected_gpus(ctx.cfg)
    pci = ctx.pci()
    have = len(pci.gpus)
    if want == 0 and have == 0:
        return SKIP, no_gpu_reason(ctx)
    if not pci.available:
        return (
            FAIL,
            f"cannot read the PCI bus (no lspci, {pci.source} unreadable); the spec declares {_gpu_label(ctx.cfg)}",
        )
    if want == 0:
        return FAIL, f"{have} NVIDIA GPU(s) on the PCI bus, but the spec declares none for this node"
    if have == 0:
        return FAIL, f"the spec declares {_gpu_label(ctx.cfg)} GPUs, but no NVIDIA GPU is on the PCI bus ({pci.source})"
    if have != want:
        return FAIL, f"{have} NVIDIA GPU(s) on the PCI bus, the spec declares {_gpu_label(ctx.cfg)}"
    ids = {d.lower() for d in (ctx.cfg.get("gpu") or {}).get("pci_device_ids") or []}
    wrong = sorted({dev for _, dev, _ in pci.gpus if ids and dev not in ids})
    if wrong:
        return FAIL, (
            f"GPU model differs from the spec ({(ctx.cfg.get('gpu') or {}).get('model')}): "
            f"bus shows device id(s) 10de:{', 10de:'.join(wrong)}"
        )
    return PASS, f"{have} NVIDIA GPU(s) on the PCI bus, as the spec declares ({_gpu_label(ctx.cfg)})"


@check(
    "hardware.nvswitch",
    "hardware",
    CRITICAL,
    "NVSwitches on the bus exactly where the spec says nvswitch",
    needs=("lspci",),
    gate=gate_gpu,
)
def _nvswitch(ctx: NodeContext) -> Outcome:
    want = bool((ctx.cfg.get("gpu") or {}).get("nvswitch"))
    pci = ctx.pci()
    have = len(pci.nvswitches)
    if want and not have:
        return FAIL, f"the spec says nvswitch: true, but {pci.source} shows no NVSwitch"
    if not want and have:
        return FAIL, f"{have} NVSwitch(es) on the bus, but the spec says nvswitch: false (fabric manager unchecked)"
    return PASS, f"{have} NVSwitch(es) on the PCI bus" if have else "no NVSwitch on the bus, as the spec says"


# -- driver


@check(
    "driver.module",
    "driver",
    CRITICAL,
    "The nvidia kernel module is loaded",
    needs=("driver", "lspci"),
    gate=gate_gpu,
)
def _driver_module(ctx: NodeContext) -> Outcome:
    loaded, version = parse_driver(ctx.out("driver"))
    if not loaded:
        return FAIL, "nvidia kernel module not loaded (no /proc/driver/nvidia/version)" + _no_bus_note(ctx)
    return PASS, f"nvidia kernel module {version or '(version unknown)'} loaded"


@check("driver.nouveau", "driver", CRITICAL, "nouveau is not loaded", needs=("modules",), gate=gate_gpu)
def _nouveau(ctx: NodeContext) -> Outcome:
    readable, names = parse_modules(ctx.out("modules"))
    if not readable:
        return FAIL, "cannot read /proc/modules"
    if "nouveau" in names:
        return FAIL, "nouveau is loaded: blacklist it (/etc/modprobe.d/blacklist-nouveau.conf), rebuild the initramfs"
    return PASS, "nouveau not loaded"


@check(
    "driver.smi",
    "driver",
    CRITICAL,
    "nvidia-smi answers and lists every GPU",
    depends_on=("driver.module",),
    needs=("smi",),
    gate=gate_gpu,
)
def _smi(ctx: NodeContext) -> Outcome:
    smi = ctx.smi()
    if smi.error:
        detail = f" ({smi.messages[0]})" if smi.messages else ""
        return FAIL, smi.error + detail
    want = expected_gpus(ctx.cfg)
    if len(smi.gpus) < want:
        return FAIL, f"nvidia-smi lists {len(smi.gpus)} of the {want} GPUs the spec declares"
    names = sorted({g.name for g in smi.gpus})
    return PASS, f"nvidia-smi lists {len(smi.gpus)} GPU(s): {', '.join(names)}"


@check(
    "driver.version",
    "driver",
    CRITICAL,
    "The loaded driver is the version the spec pins",
    depends_on=("driver.module",),
    needs=("driver", "smi"),
    gate=gate_gpu,
)
def _driver_version(ctx: NodeContext) -> Outcome:
    pin = ctx.cfg.get("driver_version")
    if not pin:
        return SKIP, "the spec pins no driver version"
    _, loaded = parse_driver(ctx.out("driver"))
    versions = {v for v in [loaded, *(g.driver_version for g in ctx.smi().gpus)] if v}
    if not versions:
        return FAIL, f"cannot read the loaded driver version (spec pins {pin})"
    if versions != {pin}:
        return FAIL, f"driver {', '.join(sorted(versions))} loaded, the spec pins {pin}"
    return PASS, f"driver {pin}, as pinned"


@check(
    "driver.persistence",
    "driver",
    WARNING,
    "Persistence mode is on for every GPU",
    depends_on=("driver.smi",),
    needs=("smi",),
    gate=gate_gpu,
)
def _persistence(ctx: NodeContext) -> Outcome:
    off = [str(g.index) for g in ctx.smi().gpus if g.persistence is not True]
    if off:
        return FAIL, f"persistence mode off on GPU {', '.join(off)} (run nvidia-persistenced --persistence-mode)"
    return PASS, "persistence mode on for all GPUs"


def gate_nvswitch(cfg: Config) -> str | None:
    return gate_gpu(cfg) or (None if (cfg.get("gpu") or {}).get("nvswitch") else "the spec declares no NVSwitch")


@check(
    "driver.fabric_manager",
    "driver",
    CRITICAL,
    "nvidia-fabricmanager runs on NVSwitch nodes",
    depends_on=("driver.module",),
    needs=("units",),
    gate=gate_nvswitch,
)
def _fabric_manager(ctx: NodeContext) -> Outcome:
    active, text = _unit_state(ctx, "nvidia-fabricmanager.service")
    return (PASS if active else FAIL), text


# -- GPU health (hardware layer)


@check(
    "gpu.ecc",
    "hardware",
    CRITICAL,
    "No uncorrected (volatile) ECC errors",
    depends_on=("driver.smi",),
    needs=("smi",),
    gate=gate_gpu,
)
def _ecc(ctx: NodeContext) -> Outcome:
    gpus = ctx.smi().gpus
    counted = [g for g in gpus if g.ecc_uncorrected is not None]
    if not counted:
        return SKIP, "no GPU reports ECC counters (ECC off or not supported)"
    bad = [f"GPU {g.index}: {g.ecc_uncorrected}" for g in counted if (g.ecc_uncorrected or 0) > 0]
    if bad:
        return FAIL, f"uncorrected volatile ECC errors: {'; '.join(bad)}"
    return PASS, f"no uncorrected ECC errors on {len(counted)} GPU(s)"


@check(
    "gpu.remapped_rows",
    "hardware",
    CRITICAL,
    "No pending or failed row remapping",
    depends_on=("driver.smi",),
    needs=("remapped",),
    gate=gate_gpu,
)
def _remapped(ctx: NodeContext) -> Outcome:
    m, rows = parse_remapped_rows(ctx.out("remapped"))
    if m.missing or m.timeout or m.rc not in (0, None):
        return FAIL, explain_smi_rc(m.rc) or "nvidia-smi --query-remapped-rows did not run"
    known = [r for r in rows if r.pending is not None or r.failure is not None]
    if not known:
        return SKIP, "row remapping not supported by these GPUs"
    bad = []
    for r in known:
        if r.failure:
            bad.append(f"{r.address}: row remapping FAILED (replace the GPU)")
        elif r.pending:
            bad.append(f"{r.address}: row remapping pending (reset the GPU)")
    if bad:
        return FAIL, "; ".join(bad)
    return PASS, f"no pending or failed row remapping on {len(known)} GPU(s)"


@check("gpu.xid", "hardware", CRITICAL, "No serious Xid errors in the kernel log", needs=("xid",), gate=gate_gpu)
def _xid(ctx: NodeContext) -> Outcome:
    source, events = parse_xid(ctx.out("xid"))
    if source is None:
        return SKIP, "kernel log not readable (dmesg and journalctl -k failed)"
    serious = [e for e in events if e[0] in SERIOUS_XIDS]
    if serious:
        seen = []
        for code, addr, text in serious:
            item = f"Xid {code} on {addr} ({XID_MEANING.get(code) or text or 'see NVIDIA Xid catalog'})"
            if item not in seen:
                seen.append(item)
        return FAIL, f"serious Xid since boot ({source}): {'; '.join(seen[:4])}"
    if events:
        codes = sorted({e[0] for e in events})
        return PASS, f"only non-serious Xid(s) since boot: {', '.join(map(str, codes))}"
    return PASS, f"no Xid errors since boot ({source})"


@check(
    "gpu.nvlink",
    "hardware",
    CRITICAL,
    "No inactive NVLinks (every link up on NVSwitch boards)",
    depends_on=("driver.smi",),
    needs=("nvlink",),
    gate=gate_gpu,
)
def _nvlink(ctx: NodeContext) -> Outcome:
    m, gpus = parse_nvlink(ctx.out("nvlink"))
    if m.missing or m.timeout or m.rc not in (0, None):
        return FAIL, explain_smi_rc(m.rc) or "nvidia-smi nvlink -s did not run"
    nvswitch = bool((ctx.cfg.get("gpu") or {}).get("nvswitch"))
    bad = []
    for g in gpus:
        if nvswitch and (g.inactive or not g.active):
            what = f"links {', '.join(map(str, g.inactive))} inactive" if g.inactive else "no active NVLink"
            bad.append(f"GPU {g.index}: {what}")
        elif g.inactive and g.active:
            bad.append(f"GPU {g.index}: links {', '.join(map(str, g.inactive))} inactive")
    if bad:
        return FAIL, "; ".join(bad)
    links = sum(g.active for g in gpus)
    if not links:
        return PASS, "no NVLink in use (no NVSwitch declared)"
    return PASS, f"{links} NVLink(s) active on {len(gpus)} GPU(s), none inactive"


@check(
    "gpu.pcie_width",
    "hardware",
    WARNING,
    "PCIe links run at full width",
    depends_on=("driver.smi",),
    needs=("smi",),
    gate=gate_gpu,
)
def _pcie(ctx: NodeContext) -> Outcome:
    gpus = [g for g in ctx.smi().gpus if g.width_current is not None and g.width_max is not None]
    if not gpus:
        return SKIP, "nvidia-smi reports no PCIe link width"
    bad = [
        f"GPU {g.index}: x{g.width_current} of x{g.width_max}"
        for g in gpus
        if (g.width_current or 0) < (g.width_max or 0)
    ]
    if bad:
        return FAIL, f"PCIe link degraded: {'; '.join(bad)}"
    return PASS, f"PCIe at full width on {len(gpus)} GPU(s)"


def gate_mig(cfg: Config) -> str | None:
    return gate_gpu(cfg) or (None if (cfg.get("mig") or {}).get("config") else "no MIG layout for this node")


@check(
    "gpu.mig",
    "hardware",
    CRITICAL,
    "The node's MIG layout is applied (nvidia-mig-parted assert)",
    depends_on=("driver.smi",),
    needs=("mig",),
    gate=gate_mig,
)
def _mig(ctx: NodeContext) -> Outcome:
    m = split_markers(ctx.out("mig"))
    name = (ctx.cfg.get("mig") or {}).get("config")
    if m.missing:
        return FAIL, "nvidia-mig-parted not found"
    if m.timeout:
        return FAIL, "nvidia-mig-parted assert did not finish"
    if m.rc == 0:
        return PASS, f"MIG layout {name} applied"
    last = next((line for line in reversed(m.lines) if line.strip()), "")
    msg = re.search(r'msg="((?:[^"\\]|\\.)*)"', last)
    return FAIL, f"MIG layout {name} not applied: {(msg.group(1) if msg else last.strip()) or f'exit {m.rc}'}"


def gate_diag(cfg: Config) -> str | None:
    dcgm = cfg.get("dcgm") or {}
    if gate_gpu(cfg):
        return gate_gpu(cfg)
    if not dcgm.get("enabled"):
        return "DCGM is not enabled in the spec"
    if not int(dcgm.get("diag_level") or 0):
        return "dcgm.diag_level is 0 (no diagnostic requested)"
    return None


@check(
    "gpu.dcgm_diag",
    "hardware",
    CRITICAL,
    "dcgmi diag at the spec's level passes",
    depends_on=("driver.smi",),
    needs=("dcgm_diag",),
    gate=gate_diag,
    health=False,
)
def _diag(ctx: NodeContext) -> Outcome:
    m = split_markers(ctx.out("dcgm_diag"))
    level = (ctx.cfg.get("dcgm") or {}).get("diag_level")
    if m.missing:
        return FAIL, "dcgmi not found (DCGM not installed)"
    if m.timeout:
        return FAIL, f"dcgmi diag -r {level} did not finish within {m.timeout} s"
    overall, failing, error = parse_diag_json(ctx.out("dcgm_diag"))
    if error and overall is None:
        return FAIL, f"dcgmi diag -r {level}: {error}"
    if overall == "fail" or failing:
        return FAIL, f"dcgmi diag -r {level} failed: {', '.join(failing) or 'see dcgmi output'}"
    if overall is None:
        return FAIL, f"dcgmi diag -r {level} reported no results (exit {m.rc})"
    return PASS, f"dcgmi diag -r {level}: {overall}"


# -- toolkit and containers


def gate_toolkit(cfg: Config) -> str | None:
    c = cfg.get("container") or {}
    if gate_gpu(cfg):
        return gate_gpu(cfg)
    if c.get("engine") in (None, "none"):
        return "no container engine in the spec"
    if not c.get("toolkit_on_host", True):
        return "the GPU Operator manages the container toolkit"
    return None


@check(
    "toolkit.runtime",
    "toolkit",
    CRITICAL,
    "The nvidia runtime is configured in the container engine",
    needs=("runtime_config", "containerd_dropin", "runtime_binary"),
    gate=gate_toolkit,
)
def _runtime(ctx: NodeContext) -> Outcome:
    c = ctx.cfg.get("container") or {}
    binary = parse_file(ctx.out("runtime_binary"))
    runtime_bin = c.get("runtime_bin")
    if binary is None:
        return FAIL, f"{runtime_bin} not installed (nvidia-container-toolkit missing)"
    engine = c.get("engine")
    if engine == "docker":
        m = split_markers(ctx.out("runtime_config"))
        if m.missing:
            return FAIL, f"{c.get('config_file')} missing: docker has no nvidia runtime"
        try:
            data = json.loads("\n".join(m.lines) or "{}")
        except ValueError as e:
            return FAIL, f"{c.get('config_file')} is not valid JSON: {e}"
        path = ((data.get("runtimes") or {}).get("nvidia") or {}).get("path")
        if path != runtime_bin:
            return FAIL, f"{c.get('config_file')}: runtimes.nvidia.path is {path!r}, want {runtime_bin}"
        return PASS, f"docker runtime nvidia -> {runtime_bin}"
    config = split_markers(ctx.out("runtime_config")).lines
    dropin = split_markers(ctx.out("containerd_dropin")).lines
    joined = "\n".join([*config, *dropin])
    if re.search(r"runtimes\.nvidia\]", joined) and runtime_bin and runtime_bin in joined:
        return PASS, f"containerd runtime nvidia -> {runtime_bin}"
    return FAIL, (
        f"no nvidia runtime with BinaryName {runtime_bin} in {c.get('config_file')} "
        f"or {c.get('containerd_dropin')} (run nvidia-ctk runtime configure --runtime=containerd)"
    )


@check(
    "container.gpu_visible",
    "container",
    CRITICAL,
    "A container sees the GPUs (test image run, else nvidia-container-cli info)",
    depends_on=("toolkit.runtime", "driver.smi"),
    needs=("container",),
    gate=gate_toolkit,
    health=False,
)
def _container(ctx: NodeContext) -> Outcome:
    lines = ctx.out("container")
    m = split_markers(lines)
    mode = m.markers.get("mode", "cli")
    want = expected_gpus(ctx.cfg)
    if m.missing:
        return FAIL, "nvidia-container-cli not found (libnvidia-container-tools missing)"
    if m.timeout:
        return FAIL, "the container check did not finish in time"
    if m.rc not in (0, None):
        tail = next((line.strip() for line in reversed(m.lines) if line.strip()), f"exit {m.rc}")
        return FAIL, f"{'container run' if mode != 'cli' else 'nvidia-container-cli info'} failed: {tail}"
    if mode == "cli":
        seen = sum(1 for line in m.lines if line.strip().startswith("Device Index:"))
        what = "nvidia-container-cli info (no test image present)"
    else:
        seen = sum(1 for line in m.lines if re.match(r"^GPU \d+: ", line))
        what = f"nvidia-smi -L in a container ({mode})"
    if seen < want:
        return FAIL, f"{what} shows {seen} of {want} GPUs"
    return PASS, f"{what} shows {seen} GPU(s)"


# -- scheduler (node side)


def gate_slurm(cfg: Config) -> str | None:
    return None if _slurm(cfg) else "not a Slurm node"


def _gate_role(role: str, what: str) -> Callable[[Config], str | None]:
    def gate(cfg: Config) -> str | None:
        return None if _slurm(cfg, role) else f"not a Slurm {what} node"

    return gate


@check("scheduler.munge", "scheduler", CRITICAL, "munged runs and credentials round-trip",
       needs=("units", "munge"), gate=gate_slurm)  # fmt: skip
def _munge(ctx: NodeContext) -> Outcome:
    active, text = _unit_state(ctx, "munge.service")
    if not active:
        return FAIL, text
    m = split_markers(ctx.out("munge"))
    if m.missing:
        return FAIL, "munge client not installed"
    if m.rc not in (0, None) or m.timeout:
        tail = next((line.strip() for line in reversed(m.lines) if line.strip()), "")
        return FAIL, f"munge -n | unmunge failed: {tail or f'exit {m.rc}'}"
    return PASS, "munge.service active; munge -n | unmunge works"


@check("scheduler.slurmd", "scheduler", CRITICAL, "slurmd runs", depends_on=("scheduler.munge",),
       needs=("units",), gate=_gate_role("compute", "compute"))  # fmt: skip
def _slurmd(ctx: NodeContext) -> Outcome:
    active, text = _unit_state(ctx, "slurmd.service")
    return (PASS if active else FAIL), text


@check("scheduler.slurmctld", "scheduler", CRITICAL, "slurmctld runs", depends_on=("scheduler.munge",),
       needs=("units",), gate=_gate_role("controller", "controller"), health=False)  # fmt: skip
def _slurmctld(ctx: NodeContext) -> Outcome:
    active, text = _unit_state(ctx, "slurmctld.service")
    return (PASS if active else FAIL), text


@check("scheduler.slurmdbd", "scheduler", CRITICAL, "slurmdbd and its database run",
       needs=("units",), gate=_gate_role("accounting_db", "accounting"), health=False)  # fmt: skip
def _slurmdbd(ctx: NodeContext) -> Outcome:
    bad = []
    texts = []
    for unit in ("mariadb.service", "slurmdbd.service"):
        active, text = _unit_state(ctx, unit)
        texts.append(text)
        if not active:
            bad.append(text)
    return (FAIL, "; ".join(bad)) if bad else (PASS, "; ".join(texts))


def gate_kubelet(cfg: Config) -> str | None:
    return None if cfg.get("kubernetes") else "not a Kubernetes node"


@check("scheduler.kubelet", "scheduler", CRITICAL, "kubelet runs", needs=("units",), gate=gate_kubelet)
def _kubelet(ctx: NodeContext) -> Outcome:
    active, text = _unit_state(ctx, "kubelet.service")
    return (PASS if active else FAIL), text


def gate_pyxis(cfg: Config) -> str | None:
    slurm = cfg.get("slurm") or {}
    if not slurm:
        return "not a Slurm node"
    if not slurm.get("pyxis"):
        return "pyxis is not enabled in the spec"
    if not (slurm.get("compute") or slurm.get("login")):
        return "not a Slurm compute or login node"
    return None


@check("job.pyxis", "job", CRITICAL, "pyxis is loaded: srun --help lists --container-image",
       needs=("srun_help",), gate=gate_pyxis)  # fmt: skip
def _pyxis(ctx: NodeContext) -> Outcome:
    m = split_markers(ctx.out("srun_help"))
    if m.missing:
        return FAIL, "srun not installed"
    if any("--container-image" in line for line in m.lines):
        return PASS, "srun --help lists --container-image (pyxis loaded)"
    err = next((line.strip() for line in m.lines if "spank" in line.lower() or "error" in line.lower()), "")
    return FAIL, "srun --help does not list --container-image: pyxis not loaded" + (f" ({err})" if err else "")


# -- monitoring


def gate_node_exporter(cfg: Config) -> str | None:
    return None if (cfg.get("node_exporter") or {}).get("enabled") else "node-exporter is not enabled in the spec"


@check("monitoring.node_exporter", "monitoring", WARNING, "node-exporter answers with node_ metrics",
       needs=("node_exporter",), gate=gate_node_exporter)  # fmt: skip
def _node_exporter(ctx: NodeContext) -> Outcome:
    port = (ctx.cfg.get("node_exporter") or {}).get("port", 9100)
    m = split_markers(ctx.out("node_exporter"))
    if m.rc != 0:
        return FAIL, f"node-exporter on :{port} does not answer: {m.markers.get('error', 'no response')}"
    names = [n for n in metric_names(m.lines) if n.startswith("node_")]
    if not names:
        return FAIL, f":{port}/metrics answers but has no node_ metrics"
    return PASS, f"node-exporter on :{port} serves {len(names)} node_ metrics"


def gate_dcgm_exporter(cfg: Config) -> str | None:
    if gate_gpu(cfg):
        return gate_gpu(cfg)
    return None if (cfg.get("dcgm") or {}).get("exporter") else "dcgm-exporter does not run on this host"


@check("monitoring.dcgm_exporter", "monitoring", WARNING, "dcgm-exporter serves the expected DCGM metrics",
       depends_on=("driver.smi",), needs=("dcgm_exporter",), gate=gate_dcgm_exporter)  # fmt: skip
def _dcgm_exporter(ctx: NodeContext) -> Outcome:
    dcgm = ctx.cfg.get("dcgm") or {}
    port = dcgm.get("exporter_port", 9400)
    m = split_markers(ctx.out("dcgm_exporter"))
    if m.rc != 0:
        return FAIL, f"dcgm-exporter on :{port} does not answer: {m.markers.get('error', 'no response')}"
    names = metric_names(m.lines)
    missing = [c for c in dcgm.get("counters") or [] if c not in names]
    if not any(n.startswith("DCGM_") for n in names):
        return FAIL, f":{port}/metrics has no DCGM_ metrics"
    if missing:
        return FAIL, f"dcgm-exporter lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
    return PASS, f"dcgm-exporter on :{port} serves {sum(n.startswith('DCGM_') for n in names)} DCGM metrics"


# -- security


def _mode_text(info: dict[str, Any]) -> str:
    return f"{info.get('mode')} {info.get('owner')}:{info.get('group')}"


@check("security.munge_key", "security", CRITICAL, "munge.key is 0400 munge:munge",
       needs=("munge_key",), gate=gate_slurm)  # fmt: skip
def _munge_key(ctx: NodeContext) -> Outcome:
    path = (ctx.cfg.get("slurm") or {}).get("munge_key")
    info = parse_file(ctx.out("munge_key"))
    if info is None:
        return FAIL, f"{path} missing"
    if info.get("error"):
        return FAIL, f"cannot read {path}: {info['error']}"
    if info.get("sha256"):
        ctx.data["security.munge_key"] = {"sha256": info["sha256"]}
    if (info.get("mode"), info.get("owner"), info.get("group")) != ("0400", "munge", "munge"):
        return FAIL, f"{path} is {_mode_text(info)}, want 0400 munge:munge"
    if not info.get("sha256"):
        return FAIL, f"{path} is not readable (no digest)"
    return PASS, f"{path} is 0400 munge:munge"


@check("security.slurmdbd_conf", "security", CRITICAL, "slurmdbd.conf (database password) is not world-readable",
       needs=("slurmdbd_conf",), gate=_gate_role("accounting_db", "accounting"), health=False)  # fmt: skip
def _slurmdbd_conf(ctx: NodeContext) -> Outcome:
    path = (ctx.cfg.get("slurm") or {}).get("slurmdbd_conf")
    info = parse_file(ctx.out("slurmdbd_conf"))
    if info is None:
        return FAIL, f"{path} missing"
    mode = int(str(info.get("mode") or "0"), 8)
    if mode & 0o007:
        return FAIL, f"{path} is {_mode_text(info)}: readable by every user (holds the database password)"
    if info.get("owner") != "slurm":
        return FAIL, f"{path} is {_mode_text(info)}, want owner slurm (slurmdbd refuses otherwise)"
    return PASS, f"{path} is {_mode_text(info)}"


# --------------------------------------------------------------------------- running


def select(ids: Iterable[str] | None = None, health_only: bool = False) -> list[Check]:
    """The node checks to run: ``ids`` (with their dependencies) or all; health mode drops slow ones."""
    pool = [c for c in NODE_CHECKS if c.health or not health_only]
    if ids is None:
        return pool
    return with_dependencies(pool, ids)


def run_node_checks(
    cfg: Config, ids: Iterable[str] | None = None, health_only: bool = False, ctx: NodeContext | None = None
) -> tuple[list[Result], NodeContext]:
    """Run the node-local checks on this machine (or on ``ctx``'s recorded outputs)."""
    ctx = ctx or NodeContext(cfg)
    checks = order_checks(select(ids, health_only))
    gates = {c.id: (c.gate(cfg) if c.gate else None) for c in checks}
    if NO_GPU_REASON in gates.values():
        reason = no_gpu_reason(ctx)
        gates = {k: (reason if v == NO_GPU_REASON else v) for k, v in gates.items()}
    # Level by level (a check's level is one more than its deepest dependency), so that the
    # probes of a check whose dependency did not pass are never read: it is not run at all.
    level: dict[str, int] = {}
    for c in checks:
        level[c.id] = 1 + max((level.get(d, -1) for d in c.depends_on), default=-1)
    results: dict[str, Result] = {}
    for depth in range(max(level.values(), default=-1) + 1):
        batch = [c for c in checks if level[c.id] == depth]
        ready = [
            c
            for c in batch
            if not gates[c.id] and all(results.get(d) is not None and results[d].status == PASS for d in c.depends_on)
        ]
        ctx.prefetch(k for c in ready for k in c.needs)
        for c in batch:

            def call(c: Check = c) -> Outcome:
                return c.fn(ctx)

            r = evaluate(c, gates[c.id], results, call)
            if r.status in (PASS, FAIL, SKIP) and not gates[c.id]:
                r.duration_s = round(r.duration_s + ctx.charge(c.needs), 4)
            results[c.id] = r
    return [results[c.id] for c in checks], ctx


# --------------------------------------------------------------------------- Slurm drain / resume


def scontrol_node(name: str) -> tuple[str | None, str | None, str]:
    """(State, Reason, error) of ``name`` from ``scontrol show node -o``."""
    lines = run_shell(guarded("scontrol", f"scontrol show node -o {quote(name)}"), 15)
    m = split_markers(lines)
    if m.missing:
        return None, None, "scontrol not found"
    if m.rc not in (0, None) or m.timeout:
        return None, None, "; ".join(line.strip() for line in m.lines if line.strip()) or f"exit {m.rc}"
    return (*parse_node_state(" ".join(m.lines)), "")


def parse_node_state(text: str) -> tuple[str | None, str | None]:
    """State and Reason of a one-line ``scontrol show node`` record."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    reason = re.search(r"(?:^|\s)Reason=(.*?)(?=\s(?:Comment|Extra|InstanceId|InstanceType)=|$)", text.strip())
    value = reason.group(1).strip() if reason else None
    return (state.group(1) if state else None), (value if value and value != "(null)" else None)


def reason_text(failures: Sequence[Result]) -> str:
    """``gpuforge: health: <id>: <message>; ...`` on one line, short enough for Slurm."""
    body = "; ".join(f"{r.id}: {r.message}" for r in failures)
    body = re.sub(r"\s+", " ", body.replace('"', "'")).strip()
    text = f"{REASON_TAG} {body}"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def decide_slurm_action(failures: Sequence[Result], state: str | None, reason: str | None) -> tuple[str | None, str]:
    """What to do with the node: ``("drain", reason)``, ``("resume", "")`` or ``(None, why not)``.

    Only critical failures drain. A node drained by someone else (reason without our tag:
    an operator, gpuforge's rolling apply) is never touched: not re-drained, never resumed.
    """
    flags = set((state or "").upper().replace("*", "").split("+"))
    drained = bool(flags & {"DRAIN", "DRAINED", "DRAINING"}) or any(f.startswith("DRAIN") for f in flags)
    ours = (reason or "").startswith(REASON_TAG)
    if failures:
        new = reason_text(failures)
        if drained and not ours:
            return None, f"already drained for another reason ({reason or 'none given'}): left as it is"
        if drained and _strip_stamp(reason or "") == new:
            return None, "already drained for the same reason"
        return "drain", new
    if drained and ours:
        return "resume", ""
    if drained:
        return None, f"drained for another reason ({reason or 'none given'}): not resumed"
    return None, "healthy"


def _strip_stamp(reason: str) -> str:
    """Slurm shows reasons as ``text [user@2024-01-01T00:00:00]``."""
    return re.sub(r"\s*\[[^\]@]*@[^\]]*\]\s*$", "", reason).strip()


def slurm_update(node: str, results: Sequence[Result]) -> str:
    """Drain or resume ``node`` after a health run; what was done, for the log."""
    failures = [r for r in results if r.status == FAIL and r.severity == CRITICAL]
    state, reason, error = scontrol_node(node)
    if error:
        return f"cannot read the state of {node}: {error}"
    action, text = decide_slurm_action(failures, state, reason)
    if action is None:
        return text
    args = ["scontrol", "update", f"NodeName={node}"]
    args += ["State=DRAIN", f"Reason={text}"] if action == "drain" else ["State=RESUME"]
    lines = run_shell(" ".join(quote(a) for a in args), 15)
    m = split_markers(lines)
    if m.rc not in (0, None) or m.timeout:
        return f"{action} {node} failed: {' '.join(m.lines).strip() or f'exit {m.rc}'}"
    return f"{'drained' if action == 'drain' else 'resumed'} {node}" + (f": {text}" if text else "")


def parent_is_slurmd() -> bool:
    """True when slurmd started us (HealthCheckProgram takes no arguments)."""
    try:
        with open(f"/proc/{os.getppid()}/comm") as f:
            return f.read().strip() == "slurmd"
    except OSError:
        return False


def node_name(cfg: Config) -> str:
    """The Slurm node name: SLURMD_NODENAME, the config's node, else ``hostname -s``."""
    return os.environ.get("SLURMD_NODENAME") or str(cfg.get("node") or "") or socket.gethostname().split(".")[0]


# --------------------------------------------------------------------------- output


def prometheus_text(node: str, results: Sequence[Result], now: float | None = None) -> str:
    """node-exporter textfile: ``gpuforge_check_status{node,check,layer,severity}`` 1 passed, 0 not."""

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    out = [
        "# HELP gpuforge_check_status 1 when a gpuforge check passed, 0 when it failed or was blocked "
        "(skipped checks are not exported).",
        "# TYPE gpuforge_check_status gauge",
    ]
    for r in results:
        if r.status == SKIP:
            continue
        labels = f'node="{esc(node)}",check="{esc(r.id)}",layer="{esc(r.layer)}",severity="{esc(r.severity)}"'
        out.append(f"gpuforge_check_status{{{labels}}} {1 if r.status == PASS else 0}")
    out += ["# HELP gpuforge_checks Checks by result.", "# TYPE gpuforge_checks gauge"]
    for status in STATUSES:
        count = sum(1 for r in results if r.status == status)
        out.append(f'gpuforge_checks{{node="{esc(node)}",status="{status}"}} {count}')
    out += [
        "# HELP gpuforge_health_last_run_timestamp_seconds When the checks last ran.",
        "# TYPE gpuforge_health_last_run_timestamp_seconds gauge",
        f'gpuforge_health_last_run_timestamp_seconds{{node="{esc(node)}"}} {time.time() if now is None else now:.3f}',
    ]
    return "\n".join(out) + "\n"


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` so that readers (node-exporter) never see half a file."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def format_results(node: str, results: Sequence[Result]) -> str:
    """Plain text, one line per check."""
    lines = []
    for r in results:
        lines.append(f"{r.status.upper():8} {r.id:28} {r.message}")
    failed = sum(1 for r in results if r.status == FAIL)
    lines.append(f"{node}: {len(results)} checks, {failed} failed")
    return "\n".join(lines)


def load_config(path: str | None, inline_b64: str | None = None) -> Config:
    """The node config: inline (base64 JSON) or a file."""
    if inline_b64:
        data = json.loads(base64.b64decode(inline_b64).decode())
    else:
        with open(path or DEFAULT_CONFIG, encoding="utf-8") as f:
            data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("the config is not a JSON object")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """``gpuforge-health``: run the node checks, report, and (Slurm mode) drain or resume."""
    p = argparse.ArgumentParser(prog="gpuforge-health", description="gpuforge node health checks")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"JSON config (default {DEFAULT_CONFIG})")
    p.add_argument("--config-b64", help=argparse.SUPPRESS)
    p.add_argument("--slurm", action="store_true", help="drain this node on failure, resume it when healthy")
    p.add_argument("--no-slurm", action="store_true", help="never drain or resume (even under slurmd)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--validate", action="store_true", help="also run the slow checks (gpuforge validate)")
    p.add_argument("--checks", help="comma-separated check ids (their dependencies run too)")
    p.add_argument("--prom", help="write a node-exporter textfile here")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config, args.config_b64)
    except (OSError, ValueError) as e:
        print(f"gpuforge-health: cannot read config {args.config}: {e}", file=sys.stderr)
        return 2
    ids = [i.strip() for i in args.checks.split(",") if i.strip()] if args.checks else None
    t0 = time.monotonic()
    results, ctx = run_node_checks(cfg, ids, health_only=not args.validate)
    node = node_name(cfg)
    slurm_mode = (args.slurm or parent_is_slurmd()) and not args.no_slurm
    action = slurm_update(node, results) if slurm_mode else None
    if args.prom:
        try:
            write_atomic(args.prom, prometheus_text(node, results))
        except OSError as e:
            print(f"gpuforge-health: cannot write {args.prom}: {e}", file=sys.stderr)
    failed = any(r.status == FAIL for r in results)
    if args.json:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "node": node,
            "hostname": socket.gethostname(),
            "ok": not failed,
            "duration_s": round(time.monotonic() - t0, 3),
            "results": [r.to_dict() for r in results],
            "data": ctx.data,
            "slurm": action,
        }
        print(json.dumps(doc))
    else:
        print(format_results(node, results))
        if action:
            print(f"slurm: {action}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""A node's hardware as Slurm sees it, from sysfs and /proc in one command (stdlib only).

The figures are those ``slurmd -C`` prints ("Print the actual hardware configuration ... The format
of output is the same as used in slurm.conf", slurmd(8)): slurmd counts hwloc's objects
(src/slurmd/common/xcpuinfo.c: ``*p_sockets = nobj[SOCKET]; *p_cores = nobj[CORE]; *p_threads =
nobj[PU]``), which hwloc reads on Linux from ``/sys/devices/system/cpu/cpu*/topology``; its memory is
``sysconf(_SC_PHYS_PAGES) * page size / 1048576`` (src/slurmd/slurmd/get_mach_stat.c), which is
``MemTotal`` of /proc/meminfo in MiB. So here:

* CPUs: the online CPUs the reading may run on (``Cpus_allowed_list``, as hwloc leaves out
  disallowed ones); sockets: their distinct ``physical_package_id``; cores: their distinct
  ``thread_siblings_list`` (one per core); threads per core: CPUs / cores; cores per socket:
  cores / sockets.
* memory_mb: ``MemTotal`` kB // 1024. NUMA nodes: ``/sys/devices/system/node/node*``.
* GPUs: NVIDIA (10de) PCI functions of a display class, counted by device id (``pci.pci_kind``);
  NICs: ``/sys/class/net`` entries with a device; HCAs: ``/sys/class/infiniband``; disks:
  ``/sys/block`` entries with a device, with their size.

Node output is untrusted: :func:`parse_hardware` is total (never raises), keeps at most
:data:`MAX_LINES` lines and names of :data:`NAME` only, and lists what it could not read in
``errors`` (a node with errors has no figures to trust).
"""

from __future__ import annotations

import os
import re
from typing import TypedDict

from gpuforge.probes._common import split_guarded
from gpuforge.probes.pci import pci_kind
from gpuforge.probes.reading import Reading

SECTION = "__section="
MAX_LINES = 20_000
NAME = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}")
CPU_ROOT = "/sys/devices/system/cpu"

HARDWARE_COMMAND = (
    f"echo {SECTION}allowed; grep '^Cpus_allowed_list:' /proc/self/status; "
    f'echo {SECTION}cpu; for c in {CPU_ROOT}/cpu[0-9]*; do [ -d "$c" ] || continue; o=1; '
    '[ -r "$c/online" ] && o=$(cat "$c/online"); '
    'echo "${c##*/} $o $(cat "$c/topology/physical_package_id" 2>/dev/null || echo -) '
    '$(cat "$c/topology/thread_siblings_list" 2>/dev/null || echo -)"; done; '
    f"echo {SECTION}memory; grep '^MemTotal:' /proc/meminfo; "
    f'echo {SECTION}numa; for n in /sys/devices/system/node/node[0-9]*; do [ -d "$n" ] && echo "${{n##*/}}"; done; '
    f'echo {SECTION}pci; for d in /sys/bus/pci/devices/*; do [ -e "$d/vendor" ] && '
    'echo "${d##*/} $(cat "$d/class") $(cat "$d/vendor") $(cat "$d/device")"; done; '
    f'echo {SECTION}net; for n in /sys/class/net/*; do [ -e "$n/device" ] && echo "${{n##*/}}"; done; '
    f'echo {SECTION}ib; for n in /sys/class/infiniband/*; do [ -e "$n" ] && echo "${{n##*/}}"; done; '
    f'echo {SECTION}block; for b in /sys/block/*; do [ -e "$b/device" ] && echo "${{b##*/}} $(cat "$b/size")"; done; '
    "echo __rc=0"
)


class Disk(TypedDict):
    name: str
    size_gb: int


class HardwareInfo(TypedDict):
    """What :data:`HARDWARE` reads (the facts file keeps one per node); figures are 0 where unread."""

    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int
    numa_nodes: int
    gpus: dict[str, int]
    nics: list[str]
    hcas: list[str]
    disks: list[Disk]
    errors: list[str]


def _sections(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[:MAX_LINES]:
        if line.startswith(SECTION):
            current = out.setdefault(line[len(SECTION) :].strip(), [])
        elif current is not None and line.strip():
            current.append(line.strip())
    return out


def cpu_list(text: str) -> set[int] | None:
    """``0-3,8,10-11`` as a set of CPU numbers; None when it is not such a list (or absurdly long)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        m = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", part.strip())
        if m is None:
            return None
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo or hi - lo > 65536:
            return None
        cpus.update(range(lo, hi + 1))
    return cpus


def _topology(sec: dict[str, list[str]], errors: list[str]) -> tuple[int, int, int, int]:
    """(cpus, sockets, cores per socket, threads per core) of the online, allowed CPUs."""
    allowed_line = next(iter(sec.get("allowed", [])), "")
    allowed = cpu_list(allowed_line.partition(":")[2]) if allowed_line else None
    packages: set[str] = set()
    cores: set[tuple[str, frozenset[int]]] = set()
    cpus = 0
    for line in sec.get("cpu", []):
        parts = line.split()
        m = re.fullmatch(r"cpu(\d{1,5})", parts[0]) if len(parts) == 4 else None
        siblings = cpu_list(parts[3]) if m and parts[3] != "-" else None
        if m is None or parts[1] not in ("0", "1") or siblings is None or not re.fullmatch(r"\d{1,5}", parts[2]):
            if not (len(parts) == 4 and parts[1] == "0"):  # an offline CPU has no topology
                errors.append(f"cpu line not understood: {line[:80]!r}")
            continue
        if parts[1] == "0" or (allowed is not None and int(m[1]) not in allowed):
            continue
        cpus += 1
        packages.add(parts[2])
        cores.add((parts[2], frozenset(siblings)))
    if not cpus:
        errors.append("no online CPU with a topology in /sys/devices/system/cpu")
        return 0, 0, 0, 0
    sockets, total_cores = len(packages), len(cores)
    if total_cores % sockets or cpus % total_cores:
        errors.append(f"uneven topology: {cpus} CPUs, {total_cores} cores, {sockets} sockets")
    return cpus, sockets, total_cores // sockets, cpus // total_cores


def _memory_mb(sec: dict[str, list[str]], errors: list[str]) -> int:
    m = re.fullmatch(r"MemTotal:\s+(\d{1,15})\s+kB", next(iter(sec.get("memory", [])), ""))
    if m is None:
        errors.append("no MemTotal in /proc/meminfo")
        return 0
    return int(m[1]) // 1024


def _gpus(sec: dict[str, list[str]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in sec.get("pci", []):
        parts = [p.lower().removeprefix("0x") for p in line.split()]
        if len(parts) != 4 or parts[2] != "10de" or not all(re.fullmatch(r"[0-9a-f]{4,6}", p) for p in parts[1:]):
            continue
        if pci_kind(parts[1][:4], parts[3]) == "gpu":
            counts[parts[3]] = counts.get(parts[3], 0) + 1
    return dict(sorted(counts.items()))


def _names(lines: list[str]) -> list[str]:
    return sorted({line for line in lines if NAME.fullmatch(line)})


def _disks(lines: list[str]) -> list[Disk]:
    out: list[Disk] = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and NAME.fullmatch(parts[0]) and re.fullmatch(r"\d{1,20}", parts[1]):
            out.append(Disk(name=parts[0], size_gb=int(parts[1]) * 512 // 10**9))
    return sorted(out, key=lambda d: d["name"])


def parse_hardware(lines: list[str]) -> HardwareInfo:
    """The node's hardware from :data:`HARDWARE_COMMAND`'s lines (total: never raises)."""
    out = split_guarded(lines)
    errors = [f"reading failed: {out.error or out.timeout or out.missing}"] if out.error or out.timeout else []
    sec = _sections(out.lines)
    if len(lines) > MAX_LINES:
        errors.append(f"more than {MAX_LINES} lines: the rest was not read")
    cpus, sockets, cores, threads = _topology(sec, errors)
    return HardwareInfo(
        cpus=cpus, sockets=sockets, cores_per_socket=cores, threads_per_core=threads,
        memory_mb=_memory_mb(sec, errors), numa_nodes=len(_names(sec.get("numa", []))), gpus=_gpus(sec),
        nics=_names(sec.get("net", [])), hcas=_names(sec.get("ib", [])), disks=_disks(sec.get("block", [])),
        errors=errors,
    )  # fmt: skip


def _read(path: str) -> str:
    with open(path) as f:
        return f.read(4096).strip()


def _grep(path: str, prefix: str) -> list[str]:
    try:
        with open(path) as f:
            return [line.rstrip("\n") for line in f if line.startswith(prefix)]
    except OSError:
        return []


def _entries(root: str, pattern: str, need: str = "") -> list[str]:
    """Names under ``root`` matching ``pattern`` (and having ``need`` inside, where given), sorted."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [n for n in names if re.fullmatch(pattern, n) and (not need or os.path.exists(f"{root}/{n}/{need}"))]


def _line(*paths: str) -> str | None:
    """The first line of each file, joined by spaces (None when one cannot be read)."""
    try:
        return " ".join(_read(p) for p in paths)
    except OSError:
        return None


def _cpu_line(name: str) -> str:
    path = f"{CPU_ROOT}/{name}"
    online = (_line(f"{path}/online") or "-") if os.access(f"{path}/online", os.R_OK) else "1"
    package = _line(f"{path}/topology/physical_package_id") or "-"
    siblings = _line(f"{path}/topology/thread_siblings_list") or "-"
    return f"{name} {online} {package} {siblings}"


def read_hardware() -> list[str]:
    """What :data:`HARDWARE_COMMAND` prints, read in-process (the node program's way)."""
    pci, block = "/sys/bus/pci/devices", "/sys/block"
    devices = [
        _line(f"{pci}/{n}/class", f"{pci}/{n}/vendor", f"{pci}/{n}/device") for n in _entries(pci, ".+", "vendor")
    ]
    disks = [(n, _line(f"{block}/{n}/size")) for n in _entries(block, ".+", "device")]
    return [
        f"{SECTION}allowed", *_grep("/proc/self/status", "Cpus_allowed_list:"),
        f"{SECTION}cpu", *[_cpu_line(n) for n in _entries(CPU_ROOT, r"cpu[0-9]+")],
        f"{SECTION}memory", *_grep("/proc/meminfo", "MemTotal:"),
        f"{SECTION}numa", *_entries("/sys/devices/system/node", r"node[0-9]+"),
        f"{SECTION}pci", *[f"{n} {d}" for n, d in zip(_entries(pci, ".+", "vendor"), devices, strict=True) if d],
        f"{SECTION}net", *_entries("/sys/class/net", ".+", "device"),
        f"{SECTION}ib", *_entries("/sys/class/infiniband", ".+"),
        f"{SECTION}block", *[f"{n} {size}" for n, size in disks if size],
        "__rc=0",
    ]  # fmt: skip


HARDWARE: Reading[HardwareInfo] = Reading(
    "platform.hardware", lambda: HARDWARE_COMMAND, parse_hardware, timeout_s=10.0, local=read_hardware
)

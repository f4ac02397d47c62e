"""The probes: the commands, files and URLs a node's checks read (each probe runs once per run)."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from gpuforge.probes.systemd import UNIT_PROPERTIES
from gpuforge.validator.node.base import Config

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


def local_http_lines(port: int, target: str, timeout: float = 3.0, limit: int = 4 << 20) -> list[str]:
    """Body lines of ``GET target`` from a node-local exporter on 127.0.0.1:``port``, then ``__rc=0``;
    ``__error=...`` and ``__rc=1`` when it fails.

    A plain HTTP/1.0 request on a socket: the server ends the body by closing the connection and
    must not answer an HTTP/1.0 request with a chunked body (RFC 9112, 6.1), and nothing asks for
    compression. urllib would do the same, for a third of the node program's start-up.
    """
    request = f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    answer = bytearray()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(request.encode("ascii"))
            while len(answer) <= limit and (chunk := conn.recv(1 << 16)):
                answer += chunk
    except OSError as e:
        return [f"__error={e}", "__rc=1"]
    head, blank, body = bytes(answer).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    if not blank or len(status) < 2 or not status[0].startswith("HTTP/"):
        return [f"__error=no HTTP answer from 127.0.0.1:{port}", "__rc=1"]
    if not status[1].startswith("2"):
        return [f"__error=HTTP {' '.join(status[1:])}", "__rc=1"]
    return [*body[:limit].decode("utf-8", "replace").splitlines(), "__rc=0"]


def _exporter_port(cfg: Config, key: str, default_port: int, field: str = "port") -> int:
    return int((cfg.get(key) or {}).get(field) or default_port)


#: node-exporter's collectors the check asks for (``collect[]``, node_exporter's README, "Filtering
#: enabled collectors", since v0.15.0; Debian 12 ships 1.5.0): ``textfile`` (gpuforge's health and
#: Slurm metrics, with ``node_textfile_scrape_error``) and ``time``, both enabled by default and by
#: gpuforge's arguments. A full scrape runs every collector (about 0.2 s on a lab node, more on a
#: node with many devices); Prometheus does that, the check need not.
NODE_EXPORTER_QUERY = "?collect%5B%5D=textfile&collect%5B%5D=time"


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
        Probe("topo", sh=lambda cfg: guarded("nvidia-smi", "nvidia-smi topo -m")),
        Probe("xid", sh=lambda cfg: XID_COMMAND),
        Probe("modules", sh=lambda cfg: 'cat /proc/modules 2>/dev/null; echo "__rc=$?"'),
        Probe("swaps", sh=lambda cfg: 'cat /proc/swaps 2>/dev/null; echo "__rc=$?"'),
        Probe("driver", sh=lambda cfg: DRIVER_COMMAND),
        Probe("units", sh=_units_command),
        Probe("munge", sh=lambda cfg: guarded("munge", "munge -n | unmunge")),
        Probe("srun_help", sh=lambda cfg: guarded("srun", "srun --help")),
        Probe("mig", sh=_mig_command, timeout=lambda cfg: 30.0),
        Probe("mig_profiles", sh=lambda cfg: guarded("nvidia-smi", "nvidia-smi mig -lgip")),
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
        Probe(
            "node_exporter",
            py=lambda cfg: local_http_lines(
                _exporter_port(cfg, "node_exporter", 9100), f"/metrics{NODE_EXPORTER_QUERY}"
            ),
        ),
        Probe(
            "dcgm_exporter",
            py=lambda cfg: local_http_lines(_exporter_port(cfg, "dcgm", 9400, "exporter_port"), "/metrics"),
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

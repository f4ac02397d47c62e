"""What the node checks read: each input is a reading of :mod:`gpuforge.probes` with its arguments
taken from the node's config, and how the node program runs it (each input is read once per run).

The deploy's facts run the same readings over SSH; nothing here parses output or builds commands.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpuforge.probes import (
    containers,
    dcgm,
    fabric,
    files,
    hardware,
    metrics,
    mig,
    nvidia,
    nvidia_smi,
    pci,
    platform,
    slurm,
    slurm_version,
    swap,
    systemd,
)
from gpuforge.probes._common import RC_MARKER, TIMEOUT_MARKER
from gpuforge.probes.reading import Reading
from gpuforge.validator.node.base import Config

T = TypeVar("T")
PROBE_ENV_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _no_args(cfg: Config) -> tuple[Any, ...]:
    return ()


@dataclass(frozen=True)
class Input(Generic[T]):
    """A reading as this node's checks need it: ``args(cfg)`` are the reading command's arguments."""

    key: str
    reading: Reading[T]
    args: Callable[[Config], tuple[Any, ...]] = _no_args
    cheap: bool = True
    """Cheap inputs are read up front, in parallel; the others only when their check runs."""

    def timeout(self, cfg: Config) -> float:
        return self.reading.timeout(*self.args(cfg))

    def read(self, cfg: Config) -> list[str]:
        """The reading's output on this machine (in-process where the reading can, else via ``/bin/sh``)."""
        args = self.args(cfg)
        if self.reading.local is not None:
            return self.reading.local(*args)
        return run_shell(self.reading.command(*args), self.reading.timeout(*args))


#: Stands in for "no unit" where the node runs none of the units the checks read.
NO_UNITS = "gpuforge-none.service"


def units_for(cfg: Config) -> list[str]:
    """systemd units whose state the checks of this node read."""
    units: list[str] = []
    slurm_cfg = cfg.get("slurm") or {}
    if slurm_cfg:
        units.append("munge.service")
        if slurm_cfg.get("compute"):
            units.append("slurmd.service")
        if slurm_cfg.get("controller"):
            units.append("slurmctld.service")
        if slurm_cfg.get("accounting_db"):
            units += ["slurmdbd.service", "mariadb.service"]
    if (cfg.get("gpu") or {}).get("nvswitch"):
        units.append("nvidia-fabricmanager.service")
    if cfg.get("kubernetes"):
        units.append("kubelet.service")
    units += [u for u in cfg.get("managed_units") or [] if isinstance(u, str) and u not in units]
    return units or [NO_UNITS]


def _section(cfg: Config, key: str) -> dict[str, Any]:
    value = cfg.get(key)
    return value if isinstance(value, dict) else {}


def _field(key: str, field: str) -> Callable[[Config], str]:
    """The config's ``key.field`` as a string ('' when unset)."""
    return lambda cfg: str(_section(cfg, key).get(field) or "")


def _one(value: Callable[[Config], Any]) -> Callable[[Config], tuple[Any, ...]]:
    """Arguments of a reading that takes the one value."""
    return lambda cfg: (value(cfg),)


def _file(key: str, field: str) -> Callable[[Config], tuple[Any, ...]]:
    """File digests' arguments: the list of the one path the config names."""
    return lambda cfg: ([_field(key, field)(cfg)],)


def _exporter(key: str, field: str, default_port: int, target: str) -> Callable[[Config], tuple[Any, ...]]:
    return lambda cfg: (int(_section(cfg, key).get(field) or default_port), target)


def _diag_args(cfg: Config) -> tuple[Any, ...]:
    return int(_section(cfg, "dcgm").get("diag_level") or 1), True


def _managed_paths(cfg: Config) -> tuple[Any, ...]:
    """The paths the health config lists as managed (``config_files``), or ``/`` when it lists none."""
    entries = cfg.get("config_files") or []
    return ([str(e["path"]) for e in entries if isinstance(e, dict) and e.get("path")] or ["/"],)


def _keyed_paths(cfg: Config) -> tuple[Any, ...]:
    """The listed files with an ``hmac`` (files holding credentials), and the node's health key file."""
    entries = cfg.get("config_files") or []
    paths = [str(e["path"]) for e in entries if isinstance(e, dict) and e.get("path") and e.get("hmac")]
    return paths, str(cfg.get("hmac_key") or "/")


NODE_EXPORTER_TARGET = f"/metrics{metrics.NODE_EXPORTER_QUERY}"

LSPCI = Input("lspci", pci.NVIDIA_PCI)
SYSFS_PCI = Input("sysfs_pci", pci.NVIDIA_SYSFS_PCI, _one(lambda cfg: str(cfg.get("_sysfs_pci") or pci.SYSFS_PCI_ROOT)))
SMI = Input("smi", nvidia_smi.GPU_QUERY)
REMAPPED = Input("remapped", nvidia_smi.REMAPPED_ROWS)
NVLINK = Input("nvlink", nvidia_smi.NVLINK_STATUS)
TOPO = Input("topo", nvidia_smi.GPU_TOPOLOGY)
RDMA = Input("rdma", fabric.RDMA, lambda cfg: (fabric.SYSFS_INFINIBAND, fabric.SYSFS_MODULE, _section(cfg, "fabric").get("modules") or ()))  # noqa: E501  # fmt: skip
XID = Input("xid", nvidia.XID_ERRORS)
MODULES = Input("modules", nvidia.KERNEL_MODULES)
SWAPS = Input("swaps", swap.PROC_SWAPS)
OS_RELEASE = Input("os_release", platform.OS_RELEASE)
HARDWARE = Input("hardware", hardware.HARDWARE)
DRIVER = Input("driver", nvidia.DRIVER_VERSION)
UNITS = Input("units", systemd.UNIT_STATES, _one(units_for))
MUNGE = Input("munge", slurm.MUNGE_ROUND_TRIP)
SRUN_HELP = Input("srun_help", slurm.SRUN_HELP)
MIG = Input("mig", mig.MIG_PARTED_ASSERT, lambda cfg: (_field("mig", "file")(cfg), _field("mig", "config")(cfg)))
MIG_PROFILES = Input("mig_profiles", mig.MIG_PROFILES)
DCGM_DIAG = Input("dcgm_diag", dcgm.DCGM_DIAG, _diag_args, cheap=False)
CONTAINER = Input(
    "container",
    containers.CONTAINER_GPUS,
    lambda cfg: (_field("container", "engine")(cfg) or "none", _field("container", "test_image")(cfg)),
    cheap=False,
)
MUNGE_KEY = Input("munge_key", files.FILE_DIGESTS, _file("slurm", "munge_key"))
SLURMDBD_CONF = Input("slurmdbd_conf", files.FILE_DIGESTS, _file("slurm", "slurmdbd_conf"))
CONTAINERD_DROPIN = Input("containerd_dropin", files.FILE_TEXT, _one(_field("container", "containerd_dropin")))
RUNTIME_CONFIG = Input("runtime_config", files.FILE_TEXT, _one(_field("container", "config_file")))
RUNTIME_BINARY = Input("runtime_binary", files.FILE_DIGESTS, _file("container", "runtime_bin"))
MANAGED_FILES = Input("managed_files", files.MANAGED_FILES, _managed_paths)
KEYED_FILES = Input("keyed_files", files.KEYED_DIGESTS, _keyed_paths)
#: Config key: the node program returns the managed files' digests in its data (validate's config layer).
READ_MANAGED = "read_managed_files"
SLURM_VERSIONS = Input("slurm_version", slurm_version.SLURM_VERSION)
#: Config key: the node program returns the installed and running Slurm versions in its data
#: (validate's ``scheduler.slurm_version``).
READ_SLURM_VERSION = "read_slurm_version"
NODE_EXPORTER = Input(
    "node_exporter", metrics.EXPORTER_METRICS, _exporter("node_exporter", "port", 9100, NODE_EXPORTER_TARGET)
)
DCGM_EXPORTER = Input("dcgm_exporter", metrics.EXPORTER_METRICS, _exporter("dcgm", "exporter_port", 9400, "/metrics"))

INPUTS: dict[str, Input[Any]] = {
    i.key: i
    for i in (
        OS_RELEASE, HARDWARE, LSPCI, SYSFS_PCI, SMI, REMAPPED, NVLINK, TOPO, XID, MODULES, SWAPS, DRIVER, UNITS, MUNGE,
        SRUN_HELP, MIG, MIG_PROFILES, DCGM_DIAG, CONTAINER, MUNGE_KEY, SLURMDBD_CONF, CONTAINERD_DROPIN, RUNTIME_CONFIG,
        RUNTIME_BINARY, MANAGED_FILES, KEYED_FILES, NODE_EXPORTER, DCGM_EXPORTER, RDMA, SLURM_VERSIONS,
    )
}  # fmt: skip


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

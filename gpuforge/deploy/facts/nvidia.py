"""pyinfra facts over the parsers in :mod:`gpuforge.probes.nvidia` (one command round trip each)."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.api import FactBase

from gpuforge.probes._common import guarded
from gpuforge.probes.nvidia import (
    GPU_QUERY_FIELDS,
    REMAPPED_ROWS_FIELDS,
    DriverVersionInfo,
    KernelModulesInfo,
    NvidiaPciInfo,
    NvidiaSmiGpuInfo,
    NvlinkInfo,
    NvswitchInfo,
    RemappedRowsInfo,
    TopologyInfo,
    XidInfo,
    parse_driver_version,
    parse_gpu_query,
    parse_lspci_nvidia,
    parse_nvlink_status,
    parse_nvswitch_devices,
    parse_proc_modules,
    parse_remapped_rows,
    parse_topology_matrix,
    parse_xid_errors,
)
from gpuforge.probes.nvidia_host import HostFacts, nvidia_host_command, parse_nvidia_host


class NvidiaPciDevices(FactBase[NvidiaPciInfo]):
    """NVIDIA devices on the PCI bus (works without any driver installed)."""

    def command(self) -> str:
        return guarded("lspci", "lspci -Dnn -d 10de:")

    @staticmethod
    def default() -> NvidiaPciInfo:
        return NvidiaPciInfo(lspci_available=False, gpus=[], nvswitches=[], other=[])

    def process(self, output: list[str]) -> NvidiaPciInfo:
        return parse_lspci_nvidia(output)


class NvidiaSmiGpus(FactBase[NvidiaSmiGpuInfo]):
    """Per-GPU inventory and health fields from ``nvidia-smi --query-gpu``."""

    def command(self) -> str:
        fields = ",".join(GPU_QUERY_FIELDS)
        return guarded("nvidia-smi", f"nvidia-smi --query-gpu={fields} --format=csv,noheader,nounits")

    @staticmethod
    def default() -> NvidiaSmiGpuInfo:
        return NvidiaSmiGpuInfo(available=False, rc=None, error=None, messages=[], gpus=[])

    def process(self, output: list[str]) -> NvidiaSmiGpuInfo:
        return parse_gpu_query(output)


class NvidiaDriverVersion(FactBase[DriverVersionInfo]):
    """Loaded NVIDIA kernel driver version (no nvidia-smi needed)."""

    def command(self) -> str:
        return (
            "cat /proc/driver/nvidia/version 2>/dev/null; "
            'echo "__sysmod=$(cat /sys/module/nvidia/version 2>/dev/null)"; '
            'echo "__refcnt=$(cat /sys/module/nvidia/refcnt 2>/dev/null)"'
        )

    @staticmethod
    def default() -> DriverVersionInfo:
        return parse_driver_version([])

    def process(self, output: list[str]) -> DriverVersionInfo:
        return parse_driver_version(output)


class NvidiaRemappedRows(FactBase[RemappedRowsInfo]):
    """Remapped-row counters and pending/failure flags per GPU."""

    def command(self) -> str:
        fields = ",".join(REMAPPED_ROWS_FIELDS)
        return guarded("nvidia-smi", f"nvidia-smi --query-remapped-rows={fields} --format=csv,noheader,nounits")

    @staticmethod
    def default() -> RemappedRowsInfo:
        return RemappedRowsInfo(available=False, rc=None, error=None, messages=[], gpus=[])

    def process(self, output: list[str]) -> RemappedRowsInfo:
        return parse_remapped_rows(output)


class NvlinkStatus(FactBase[NvlinkInfo]):
    """Per-GPU NVLink speeds; inactive links are counted in ``inactive_links``."""

    def command(self) -> str:
        return guarded("nvidia-smi", "nvidia-smi nvlink -s")

    @staticmethod
    def default() -> NvlinkInfo:
        return NvlinkInfo(available=False, rc=None, error=None, messages=[], gpus=[], inactive_links=0)

    def process(self, output: list[str]) -> NvlinkInfo:
        return parse_nvlink_status(output)


class GpuTopology(FactBase[TopologyInfo]):
    """How each GPU pair is connected (``NV18`` through NVSwitch, ``SYS``/``NODE``/``PIX`` over PCIe)."""

    def command(self) -> str:
        return guarded("nvidia-smi", "nvidia-smi topo -m")

    @staticmethod
    def default() -> TopologyInfo:
        return TopologyInfo(
            available=False, rc=None, error=None, messages=[], gpus=[], links={}, cpu_affinity={}, numa_affinity={}
        )

    def process(self, output: list[str]) -> TopologyInfo:
        return parse_topology_matrix(output)


class XidErrors(FactBase[XidInfo]):
    """NVIDIA Xid errors from the kernel ring buffer (``dmesg``, else ``journalctl -k -b``)."""

    def command(self) -> str:
        return (
            "if dmesg >/dev/null 2>&1; then echo '__source=dmesg'; dmesg | grep -a 'NVRM: Xid'; "
            "elif command -v journalctl >/dev/null 2>&1; then echo '__source=journalctl'; "
            "journalctl -k -b --no-pager -q 2>/dev/null | grep -a 'NVRM: Xid'; "
            "else echo '__source=none'; fi; true"
        )

    @staticmethod
    def default() -> XidInfo:
        return XidInfo(source=None, events=[], codes=[], serious_codes=[])

    def process(self, output: list[str]) -> XidInfo:
        return parse_xid_errors(output)


class KernelModules(FactBase[KernelModulesInfo]):
    """Loaded kernel modules keyed by name (e.g. ``nvidia``, ``nvidia_drm``, ``nouveau``)."""

    def command(self) -> str:
        return 'cat /proc/modules 2>/dev/null; echo "__rc=$?"'

    @staticmethod
    def default() -> KernelModulesInfo:
        return KernelModulesInfo(readable=False, modules={})

    def process(self, output: list[str]) -> KernelModulesInfo:
        return parse_proc_modules(output)


class NvswitchDevices(FactBase[NvswitchInfo]):
    """NVSwitch devices the driver registered (non-empty means Fabric Manager is needed)."""

    def command(self) -> str:
        return 'ls -1 /proc/driver/nvidia-nvswitch/devices 2>/dev/null; echo "__rc=$?"'

    @staticmethod
    def default() -> NvswitchInfo:
        return NvswitchInfo(present=False, devices=[])

    def process(self, output: list[str]) -> NvswitchInfo:
        return parse_nvswitch_devices(output)


class NvidiaHost(FactBase[HostFacts]):
    """GPUs and NVSwitches on the PCI bus, the loaded driver, chosen package versions."""

    def command(self, packages: Sequence[str] = ()) -> str:
        return nvidia_host_command(packages)

    @staticmethod
    def default() -> HostFacts:
        return HostFacts()

    def process(self, output: list[str]) -> HostFacts:
        return parse_nvidia_host(output)

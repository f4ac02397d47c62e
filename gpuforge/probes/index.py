"""Every node reading, by name: what the fact fixtures and the deploy's fact adapter look up.

The node program does not import this module (it carries only the probes its checks use).
"""

from __future__ import annotations

from typing import Any

from gpuforge.probes import (
    containers,
    dcgm,
    fabric,
    files,
    hardware,
    image,
    metrics,
    mig,
    nvidia,
    nvidia_host,
    nvidia_smi,
    packages,
    pci,
    platform,
    slurm,
    slurm_log,
    slurm_version,
    swap,
    systemd,
)
from gpuforge.probes.reading import Reading

READINGS: dict[str, Reading[Any]] = {
    r.name: r
    for r in (
        pci.NVIDIA_PCI,
        pci.NVIDIA_SYSFS_PCI,
        nvidia.DRIVER_VERSION,
        nvidia.XID_ERRORS,
        nvidia.KERNEL_MODULES,
        nvidia.NVSWITCH_DEVICES,
        nvidia_host.NVIDIA_HOST,
        platform.OS_RELEASE,
        hardware.HARDWARE,
        nvidia_smi.GPU_QUERY,
        nvidia_smi.REMAPPED_ROWS,
        nvidia_smi.NVLINK_STATUS,
        nvidia_smi.GPU_TOPOLOGY,
        mig.MIG_MODE,
        mig.MIG_DEVICES,
        mig.MIG_PROFILES,
        mig.MIG_PARTED_ASSERT,
        dcgm.DCGM_DIAG,
        metrics.EXPORTER_METRICS,
        files.FILE_DIGESTS,
        files.FILE_TEXT,
        files.FILE_TEXTS,
        files.MANAGED_FILES,
        files.KEYED_DIGESTS,
        image.IMAGE_RECORD_READING,
        packages.DEB_VERSIONS,
        systemd.UNIT_STATES,
        swap.PROC_SWAPS,
        slurm.SINFO_NODES,
        slurm.SCONTROL_NODES,
        slurm_log.SLURMCTLD_CONF_HASH,
        slurm.SCONTROL_PARTITIONS,
        slurm.SACCTMGR,
        slurm.SLURMD_HARDWARE,
        slurm_version.SLURM_VERSION,
        slurm.MUNGE_ROUND_TRIP,
        slurm.SRUN_HELP,
        containers.CONTAINER_GPUS,
        fabric.RDMA,
        fabric.GPU_NIC_TOPOLOGY,
    )
}

"""dcgm-exporter's counter catalog: every DCGM field a spec may ask dcgm-exporter to export.

Data from dcgm-exporter's ``etc/default-counters.csv`` and ``etc/dcp-metrics-included.csv``
(``shared/reference/upstream/dcgm-exporter/``; a render test checks both tables against them).
The spec checks ``dcgm.counters`` against it; the renderer writes the CSV from it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class DcgmCounter:
    """One line of a dcgm-exporter counters CSV: ``FIELD, type, help``."""

    field: str
    type: str
    help: str


def _counters(rows: Iterable[tuple[str, str, str]]) -> tuple[DcgmCounter, ...]:
    return tuple(DcgmCounter(*row) for row in rows)


# The active (uncommented) lines of dcgm-exporter's etc/default-counters.csv, in order.
DCGM_DEFAULT_COUNTERS: tuple[DcgmCounter, ...] = _counters(
    (
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
        ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
        ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
        (
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
        ),
        (
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "gauge",
            "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads"
            " - in bytes per second.",
        ),
        (
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            "gauge",
            "The rate of data received over the PCIe bus - including both protocol headers and data payloads"
            " - in bytes per second.",
        ),
    )
)

# Fields that dcgm-exporter's etc/default-counters.csv and etc/dcp-metrics-included.csv
# list commented out: valid choices that are off by default.
DCGM_OPTIONAL_COUNTERS: tuple[DcgmCounter, ...] = _counters(
    (
        ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns)."),
        ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns)."),
        ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter", "Throttling duration due to sync-boost constraints (in ns)."),
        ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "counter", "Throttling duration due to board limit constraints (in ns)."),
        ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter", "Throttling duration due to low utilization (in ns)."),
        ("DCGM_FI_DEV_RELIABILITY_VIOLATION", "counter", "Throttling duration due to reliability constraints (in ns)."),
        ("DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", "reported clock events"),
        ("DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs during last window"),
        ("DCGM_EXP_GPU_HEALTH_STATUS", "counter", "DCGM reported health status"),
        ("DCGM_EXP_P2P_STATUS", "counter", "P2P NvLink status"),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total number of single-bit persistent ECC errors."),
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total number of double-bit persistent ECC errors."),
        ("DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors."),
        ("DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors."),
        ("DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement."),
        (
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "counter",
            "Total number of NVLink flow-control CRC errors.",
        ),
        ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
        ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
        ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
            "counter",
            "The number of bytes of active NVLink rx or tx data including both header and payload.",
        ),
        ("DCGM_FI_NVML_VERSION", "label", "NVML Version"),
        ("DCGM_FI_DEV_BRAND", "label", "Device Brand"),
        ("DCGM_FI_DEV_SERIAL", "label", "Device Serial Number"),
        ("DCGM_FI_DEV_OEM_INFOROM_VER", "label", "OEM inforom version"),
        ("DCGM_FI_DEV_ECC_INFOROM_VER", "label", "ECC inforom version"),
        ("DCGM_FI_DEV_POWER_INFOROM_VER", "label", "Power management object inforom version"),
        ("DCGM_FI_DEV_INFOROM_IMAGE_VER", "label", "Inforom image version"),
        ("DCGM_FI_DEV_VBIOS_VERSION", "label", "VBIOS version of the device"),
        ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
        ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM."),
        ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active."),
        ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active."),
        ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active."),
    )
)

DCGM_FIELDS: dict[str, DcgmCounter] = {c.field: c for c in (*DCGM_DEFAULT_COUNTERS, *DCGM_OPTIONAL_COUNTERS)}


def dcgm_counter(field: str) -> DcgmCounter:
    """The catalog entry of a DCGM field; a ValueError names unknown fields and close matches."""
    name = field.strip()
    if name in DCGM_FIELDS:
        return DCGM_FIELDS[name]
    close = difflib.get_close_matches(name.upper(), list(DCGM_FIELDS), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see dcgm-exporter's default-counters.csv"
    raise ValueError(f"dcgm.counters: unknown DCGM field {field!r}{hint}")

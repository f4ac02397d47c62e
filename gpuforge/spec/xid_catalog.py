"""NVIDIA's Xid catalog as gpuforge acts on it: one row per Xid, read by everything that judges one.

The node health check (``gpu.xid``, in ``gpuforge-health`` and ``gpuforge validate``) fails on a
critical Xid and only notes the others; the Prometheus rules (``gpuforge.render.alert_rules``) alert
on the critical ones, with the row's runbook. Both read this table; tests/validator/test_xid_catalog.py
holds them to it.

Sources (every row):

* NVIDIA, "Analyzing Xid Errors with the Xid Catalog",
  https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html: the "Xids" sheet's Code,
  Mnemonic, Description, "Applies to A100/H100" and "Resolution Bucket (Immediate Action)"
  (``bucket`` below, verbatim), and the "Guidance Class" sheet that defines each bucket.
  The table holds every Xid the catalog marks as applying to A100 or H100, except those it
  describes as "Unused" and the newest codes (167 and up) that it gives no bucket.
* NVIDIA/NVSentinel ``distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv``
  (commit 6f8b0fcfa8e502bdda78fabf96facef729a9285b): the same buckets per code, with FATAL for
  every code critical here and NONFATAL for every other one.
* NVIDIA/k8s-device-plugin ``internal/rm/health.go`` (commit 02597b97a66aee924ae59788e8de24955d07f2d0)
  skips 13, 31, 43, 45, 68 and 109 as application errors ("the GPU should still be healthy");
  the catalog since asks for a GPU reset on 109 (Xid 154 linkage from driver R570), which wins here.
* NVIDIA, "GPU Memory Error Management", Error Recovery and Response Flags,
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html:
  a row-remapping failure is defined by the RMA policy thresholds, hence RMA for Xid 64.

Invariants: codes are unique and sorted; ``action`` is ``BUCKET_ACTION[bucket]`` except where a
row says why not; a row is critical exactly when its action takes the GPU out of service.
Standard library only: the node program carries this module.
"""

from __future__ import annotations

from dataclasses import dataclass

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

NONE, RESTART_APP, RESET_GPU, DRAIN, RMA = "none", "restart app", "reset GPU", "drain", "RMA"
ACTIONS = (NONE, RESTART_APP, RESET_GPU, DRAIN, RMA)
#: What each action asks of an operator.
ACTION_TODO = {
    NONE: "no action needed",
    RESTART_APP: "restart the application; the GPU stays in service",
    RESET_GPU: "drain the node, stop its GPU processes and reset the GPU (nvidia-smi -r); reboot if that fails",
    DRAIN: "drain the node, then restart or service it (a GPU reset is not enough)",
    RMA: "drain the node and have the GPU replaced (RMA)",
}
CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITY = {NONE: INFO, RESTART_APP: WARNING, RESET_GPU: CRITICAL, DRAIN: CRITICAL, RMA: CRITICAL}

#: gpuforge's action for each of the catalog's immediate-action buckets (its "Guidance Class" sheet).
BUCKET_ACTION = {
    "IGNORE": NONE,  # "No Action required"
    "XID_154": NONE,  # "Follow XID 154 reported guidance": it names the action another Xid needs
    "RESTART_APP": RESTART_APP,  # "The application should be restarted"
    # "Solo: RESTART_FM; Not Solo: IGNORE (follow guidance in other Xid)". Xid 45's trigger text: the
    # application was torn down (Control-C, GPU reset, kill); the k8s-device-plugin: an application error.
    "WORKFLOW_XID_45": RESTART_APP,
    "RESET_GPU": RESET_GPU,
    "WORKFLOW_XID_48": RESET_GPU,  # "Solo: RESET_GPU; w/ 63 or 64: DRAIN_AND_RESET"
    "WORKFLOW_NVLINK_ERR": RESET_GPU,  # Xid 74: "A GPU reset or node reboot is needed to clear this error"
    "RESTART_BM": DRAIN,  # "Restart bare metal, system should be restarted"
    "RESTART_VM": DRAIN,  # "VM owning the affected GPU must be restarted"
    "CHECK_MECHANICALS": DRAIN,  # "Check to ensure that device seating and all applicable connections ... are secure"
    "UPDATE_SWFW": DRAIN,  # "Update Firmware and Software to latest versions"
}


@dataclass(frozen=True)
class Xid:
    """One catalog row and what gpuforge does about it."""

    code: int
    mnemonic: str
    meaning: str
    bucket: str
    """The catalog's "Resolution Bucket (Immediate Action)", verbatim."""
    action: str
    note: str = ""

    @property
    def severity(self) -> str:
        return SEVERITY[self.action]

    @property
    def critical(self) -> bool:
        """The GPU cannot take work until someone acts: the health check fails, an alert fires."""
        return self.severity == CRITICAL

    def runbook(self) -> str:
        """What it means and what to do, in one line."""
        return f"{self.meaning}: {ACTION_TODO[self.action]}" + (f"; {self.note}" if self.note else "")


def _row(code: int, mnemonic: str, meaning: str, bucket: str, action: str | None = None, note: str = "") -> Xid:
    return Xid(code, mnemonic, meaning, bucket, action or BUCKET_ACTION[bucket], note)


def _engine(code: int, engine: str, meaning: str) -> Xid:
    """An engine exception (copy engine, video decoder, JPEG): the catalog restarts the application."""
    return _row(code, f"ROBUST_CHANNEL_{engine}_ERROR", meaning, "RESTART_APP")


XIDS: tuple[Xid, ...] = tuple(
    sorted(
        [
            _row(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
            _row(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP"),
            _row(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP"),
            _row(25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP"),
            _row(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
            _row(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP"),
            _row(37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE"),
            _row(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE"),
            *(_engine(39 + n, f"CE{n}", "Copy Engine Exception") for n in range(3)),
            _row(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE"),
            _row(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE"),
            _row(
                45,
                "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
                "Preemptive cleanup, due to previous errors",
                "WORKFLOW_XID_45",
                note="it follows another Xid: act on that one",
            ),
            _row(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
            _row(
                48,
                "ROBUST_CHANNEL_GPU_ECC_DBE",
                "Double Bit ECC Error",
                "WORKFLOW_XID_48",
                note="an SRAM error past its threshold follows NVIDIA's RMA flow",
            ),
            _row(
                54,
                "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
                "Auxiliary power is not connected to the GPU board",
                "CHECK_MECHANICALS",
                note="check the board's seating and its power connections",
            ),
            _engine(60, "SEC2", "Video processor exception"),
            _row(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU"),
            _row(
                63,
                "INFOROM_DRAM_RETIREMENT_EVENT",
                "GPU memory remapping event",
                "IGNORE",
                note="a pending remap is reported by gpu.remapped_rows until the GPU is reset",
            ),
            _row(
                64,
                "INFOROM_DRAM_RETIREMENT_FAILURE",
                "GPU memory remapping failure",
                "RESET_GPU",
                RMA,
                note="NVIDIA's RMA policy judges a row-remapping failure (GPU Memory Error Management)",
            ),
            _row(66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE"),
            _row(67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE"),
            _engine(68, "NVDEC0", "NVDEC0 Exception"),
            _row(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
            *(_engine(67 + n, f"CE{n}", f"CE{n}: Unknown Error") for n in (3, 4, 5)),
            _row(
                74,
                "NVLINK_ERROR",
                "NVLINK Error",
                "WORKFLOW_NVLINK_ERR",
                note="nvidia-smi nvlink -e shows the errors; call the vendor if a reset does not clear it",
            ),
            *(_engine(69 + n, f"CE{n}", f"CE{n}: Unknown Error") for n in (6, 7, 8)),
            _row(
                78,
                "VGPU_START_ERROR",
                "vGPU Start Error",
                "UPDATE_SWFW",
                note="update the host and guest drivers and firmware",
            ),
            _row(
                79,
                "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
                "GPU has fallen off the bus",
                "RESTART_BM",
                note="check the PCIe link and power if it repeats",
            ),
            _row(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP"),
            _engine(82, "NVJPG0", "NVJPG0 Error"),
            _engine(83, "NVDEC1", "NVDEC1 Error"),
            _engine(84, "NVDEC2", "NVDEC2 Error"),
            _engine(85, "CE9", "CE9: Unknown Error"),
            _engine(86, "OFA0", "OFA Exception"),
            _engine(88, "NVDEC3", "NVDEC3 Error"),
            _engine(89, "NVDEC4", "NVDEC4 Error"),
            _row(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
            _row(93, "INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
            _row(
                94,
                "ROBUST_CHANNEL_CONTAINED_ERROR",
                "Contained memory error",
                "RESTART_APP",
                note="the catalog recommends a GPU reset when convenient",
            ),
            _row(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
            *(_engine(91 + n, f"NVDEC{n}", f"NVDEC{n} Error") for n in (5, 6, 7)),
            *(_engine(98 + n, f"NVJPG{n}", f"NVJPG{n} Error") for n in range(1, 8)),
            _row(106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE"),
            _row(107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE"),
            _row(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU"),
            _row(110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU"),
            _row(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU"),
            _row(120, "GSP_ERROR", "GSP Error", "RESET_GPU"),
            _row(136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU"),
            _row(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE"),
            _row(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU"),
            _row(141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE"),
            _row(143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU"),
            _row(
                151,
                "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
                "Key rotation Error",
                "RESTART_VM",
                note="the catalog restarts the VM that owns the GPU",
            ),
            _row(
                154,
                "GPU_RECOVERY_ACTION_CHANGED",
                "GPU Recovery Action Changed",
                "XID_154",
                note="it names the recovery action another Xid needs: act on that Xid",
            ),
            _row(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU"),
            _row(157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE"),
            _row(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU"),
        ],
        key=lambda x: x.code,
    )
)
BY_CODE: dict[int, Xid] = {x.code: x for x in XIDS}
#: Xids that take a GPU out of service: ``gpu.xid`` fails on them, the alert rules fire on them.
CRITICAL_XIDS: tuple[int, ...] = tuple(x.code for x in XIDS if x.critical)


def describe(code: int) -> str:
    """``Xid 79 (GPU has fallen off the bus; drain)`` for a known code, else a pointer to the catalog."""
    row = BY_CODE.get(code)
    if row is None:
        return f"Xid {code} (not in gpuforge's table: see {CATALOG_URL})"
    return f"Xid {code} ({row.meaning}; {row.action})"

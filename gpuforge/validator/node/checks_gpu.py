"""Checks of the GPU hardware and the driver: GPU count, NVSwitch, module, nvidia-smi, ECC, Xid, NVLink, MIG, DCGM."""

from __future__ import annotations

from gpuforge.spec import xid_catalog
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, WARNING, Config, Outcome
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import DCGM_DIAG, DRIVER, MIG, MIG_PROFILES, MODULES, NVLINK, REMAPPED, TOPO, XID


def expected_gpus(cfg: Config) -> int:
    return int((cfg.get("gpu") or {}).get("count") or 0)


def _gpu_label(cfg: Config) -> str:
    gpu = cfg.get("gpu") or {}
    return f"{gpu.get('count', 0)} x {gpu.get('model', 'GPU')}"


def slurm_role(cfg: Config, role: str | None = None) -> bool:
    slurm = cfg.get("slurm") or {}
    return bool(slurm) and (role is None or bool(slurm.get(role)))


NO_GPU_REASON = "the spec declares no GPUs for this node"
#: Critical Xids a gpu.xid failure names (the rest are counted).
MAX_XIDS_LISTED = 4


def gate_gpu(cfg: Config) -> str | None:
    """GPU checks apply where the spec declares GPUs."""
    if expected_gpus(cfg) == 0:
        return NO_GPU_REASON
    return None


def no_gpu_reason(ctx: NodeContext) -> str:
    """Why GPU checks are skipped, with what the PCI bus shows."""
    pci = ctx.pci()
    if not pci["readable"]:
        return f"{NO_GPU_REASON} (PCI bus not readable: no lspci, {pci['source']} unreadable)"
    if not pci["gpus"]:
        return f"no NVIDIA device on the PCI bus ({pci['source']} lists none) and {NO_GPU_REASON}"
    return f"{NO_GPU_REASON} ({len(pci['gpus'])} NVIDIA GPU(s) on the bus: see hardware.gpu_count)"


def _no_bus_note(ctx: NodeContext) -> str:
    pci = ctx.pci()
    if pci["readable"] and not pci["gpus"]:
        return f"; no NVIDIA GPU on the PCI bus ({pci['source']} lists none)"
    return ""


def unit_state_outcome(ctx: NodeContext, unit: str) -> tuple[bool, str]:
    state = ctx.unit(unit)
    if state is None:
        return False, f"{unit}: state unknown (systemctl show gave nothing)"
    if state["LoadState"] == "not-found":
        return False, f"{unit} is not installed"
    active = state["ActiveState"] == "active"
    return active, f"{unit} is {state['ActiveState']} ({state['SubState']})"


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
    have = len(pci["gpus"])
    if want == 0 and have == 0:
        return SKIP, no_gpu_reason(ctx)
    if not pci["readable"]:
        return (
            FAIL,
            f"cannot read the PCI bus (no lspci, {pci['source']} unreadable); the spec declares {_gpu_label(ctx.cfg)}",
        )
    if want == 0:
        return FAIL, f"{have} NVIDIA GPU(s) on the PCI bus, but the spec declares none for this node"
    if have == 0:
        return (
            FAIL,
            f"the spec declares {_gpu_label(ctx.cfg)} GPUs, but no NVIDIA GPU is on the PCI bus ({pci['source']})",
        )
    if have != want:
        return FAIL, f"{have} NVIDIA GPU(s) on the PCI bus, the spec declares {_gpu_label(ctx.cfg)}"
    ids = {d.lower() for d in (ctx.cfg.get("gpu") or {}).get("pci_device_ids") or []}
    wrong = sorted({g["device_id"] for g in pci["gpus"] if ids and g["device_id"] not in ids})
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
    have = len(pci["nvswitches"])
    if want and not have:
        return FAIL, f"the spec says nvswitch: true, but {pci['source']} shows no NVSwitch"
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
    driver = ctx.read(DRIVER)
    if not driver["loaded"]:
        return FAIL, "nvidia kernel module not loaded (no /proc/driver/nvidia/version)" + _no_bus_note(ctx)
    return PASS, f"nvidia kernel module {driver['version'] or '(version unknown)'} loaded"


@check("driver.nouveau", "driver", CRITICAL, "nouveau is not loaded", needs=("modules",), gate=gate_gpu)
def _nouveau(ctx: NodeContext) -> Outcome:
    modules = ctx.read(MODULES)
    if not modules["readable"]:
        return FAIL, "cannot read /proc/modules"
    if "nouveau" in modules["modules"]:
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
    if smi["error"]:
        detail = f" ({smi['messages'][0]})" if smi["messages"] else ""
        return FAIL, smi["error"] + detail
    want = expected_gpus(ctx.cfg)
    if len(smi["gpus"]) < want:
        return FAIL, f"nvidia-smi lists {len(smi['gpus'])} of the {want} GPUs the spec declares"
    names = sorted({g["name"] or "?" for g in smi["gpus"]})
    return PASS, f"nvidia-smi lists {len(smi['gpus'])} GPU(s): {', '.join(names)}"


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
    loaded = ctx.read(DRIVER)["version"]
    versions = {v for v in [loaded, *(g["driver_version"] for g in ctx.smi()["gpus"])] if v}
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
    off = [str(g["index"]) for g in ctx.smi()["gpus"] if g["persistence_mode"] is not True]
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
    active, text = unit_state_outcome(ctx, "nvidia-fabricmanager.service")
    return (PASS if active else FAIL), text


@check(
    "gpu.topology",
    "hardware",
    CRITICAL,
    "Every GPU pair of an NVSwitch node is joined by NVLink (nvidia-smi topo -m)",
    depends_on=("driver.smi",),
    needs=("topo",),
    gate=gate_nvswitch,
)
def _topology(ctx: NodeContext) -> Outcome:
    """On an NVSwitch system each GPU reaches each other one through the switches (``NV<links>``);
    a pair over PCIe (``SYS``, ``NODE``, ``PHB``, ``PXB``, ``PIX``) has lost its NVLink path."""
    info = ctx.read(TOPO)
    if not info["available"]:
        return FAIL, "nvidia-smi not found"
    if not info["links"]:
        return FAIL, info["error"] or "; ".join(info["messages"]) or "nvidia-smi topo -m listed no GPU pair"
    slow = {pair: how for pair, how in info["links"].items() if not how.startswith("NV")}
    if slow:
        listed = ", ".join(f"{pair} ({how})" for pair, how in sorted(slow.items()))
        return FAIL, f"{len(slow)} of {len(info['links'])} GPU pairs not joined by NVLink: {listed}"
    kinds = ", ".join(sorted(set(info["links"].values())))
    return PASS, f"all {len(info['links'])} GPU pairs joined by NVLink ({kinds})"


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
    gpus = ctx.smi()["gpus"]
    counted = [g for g in gpus if g["ecc_uncorrected_volatile"] is not None]
    if not counted:
        gpu = ctx.cfg.get("gpu") or {}
        if gpu.get("ecc_expected"):
            return FAIL, (
                f"ECC is off or unreadable on all {len(gpus)} GPU(s), but the spec's {gpu.get('model')} has ECC "
                "memory: uncorrected errors would go unseen (nvidia-smi -e 1, then reset the GPUs)"
            )
        return SKIP, "no GPU reports ECC counters (ECC off or not supported)"
    bad = [
        f"GPU {g['index']}: {g['ecc_uncorrected_volatile']}"
        for g in counted
        if (g["ecc_uncorrected_volatile"] or 0) > 0
    ]
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
    info = ctx.read(REMAPPED)
    if info["error"] or not info["available"]:
        return FAIL, info["error"] or "nvidia-smi --query-remapped-rows did not run"
    known = [r for r in info["gpus"] if r["pending"] is not None or r["failure"] is not None]
    if not known:
        return SKIP, "row remapping not supported by these GPUs"
    bad = []
    for r in known:
        if r["failure"]:
            bad.append(f"{r['pci_address']}: row remapping FAILED (replace the GPU)")
        elif r["pending"]:
            bad.append(f"{r['pci_address']}: row remapping pending (reset the GPU)")
    if bad:
        return FAIL, "; ".join(bad)
    return PASS, f"no pending or failed row remapping on {len(known)} GPU(s)"


@check("gpu.xid", "hardware", CRITICAL, "No critical Xid in the kernel log since boot", needs=("xid",), gate=gate_gpu)
def _xid(ctx: NodeContext) -> Outcome:
    """Critical, per ``gpuforge.spec.xid_catalog`` (the alert rules' table too): the GPU needs a reset,
    the node a restart, or the GPU a replacement. Other Xids are named, and pass."""
    info = ctx.read(XID)
    if info["source"] is None:  # no evidence is not a pass: a fallen-off GPU would go unseen
        return FAIL, "cannot read the kernel log (dmesg and journalctl -k failed): critical Xids cannot be ruled out"
    critical: list[str] = []
    for event in info["events"]:
        row = xid_catalog.BY_CODE.get(event["code"])
        if row is not None and row.critical:
            item = f"Xid {row.code} on {event['pci_address']} ({row.meaning}: {row.action})"
            if item not in critical:
                critical.append(item)
    if critical:
        more = f" and {len(critical) - MAX_XIDS_LISTED} more" if len(critical) > MAX_XIDS_LISTED else ""
        return FAIL, f"critical Xid since boot ({info['source']}): {'; '.join(critical[:MAX_XIDS_LISTED])}{more}"
    if info["codes"]:
        return PASS, f"no critical Xid since boot, only {', '.join(map(xid_catalog.describe, info['codes']))}"
    return PASS, f"no Xid errors since boot ({info['source']})"


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
    info = ctx.read(NVLINK)
    if info["error"] or not info["available"]:
        return FAIL, info["error"] or "nvidia-smi nvlink -s did not run"
    nvswitch = bool((ctx.cfg.get("gpu") or {}).get("nvswitch"))
    bad, links = [], 0
    for g in info["gpus"]:
        active = sum(link["active"] for link in g["links"])
        inactive = ", ".join(str(link["link"]) for link in g["links"] if not link["active"])
        links += active
        if nvswitch and (inactive or not active):
            bad.append(f"GPU {g['index']}: {f'links {inactive} inactive' if inactive else 'no active NVLink'}")
        elif inactive and active:
            bad.append(f"GPU {g['index']}: links {inactive} inactive")
    if bad:
        return FAIL, "; ".join(bad)
    if not links:
        return PASS, "no NVLink in use (no NVSwitch declared)"
    return PASS, f"{links} NVLink(s) active on {len(info['gpus'])} GPU(s), none inactive"


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
    gpus = [g for g in ctx.smi()["gpus"] if g["pcie_link_width_current"] is not None and g["pcie_link_width_max"]]
    if not gpus:
        return SKIP, "nvidia-smi reports no PCIe link width"
    bad = [
        f"GPU {g['index']}: x{g['pcie_link_width_current']} of x{g['pcie_link_width_max']}"
        for g in gpus
        if (g["pcie_link_width_current"] or 0) < (g["pcie_link_width_max"] or 0)
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
    info = ctx.read(MIG)
    name = (ctx.cfg.get("mig") or {}).get("config")
    if info["applied"]:
        return PASS, f"MIG layout {name} applied"
    if not info["available"] or info["applied"] is None:
        return FAIL, info["message"] or "nvidia-mig-parted assert did not run"
    why = info["message"] or f"exit {info['rc']}"
    return FAIL, f"MIG layout {name} not applied: {why}"


@check(
    "gpu.mig_profiles",
    "hardware",
    CRITICAL,
    "The GPUs offer every MIG profile the node's layout names (nvidia-smi mig -lgip)",
    depends_on=("driver.smi",),
    needs=("mig_profiles",),
    gate=gate_mig,
)
def _mig_profiles(ctx: NodeContext) -> Outcome:
    """A layout written for another memory size (1g.10gb on a 94 GB H100, which offers 1g.12gb)
    is named here, instead of mig-parted's failure to create an unknown profile."""
    info = ctx.read(MIG_PROFILES)
    wanted = [str(p) for p in (ctx.cfg.get("mig") or {}).get("profiles") or []]
    if not info["available"]:
        return FAIL, "nvidia-smi not found"
    if not info["profiles"]:
        if info["messages"]:
            return SKIP, f"{info['messages'][0]} (MIG mode is off: gpu.mig says why)"
        return FAIL, info["error"] or "nvidia-smi mig -lgip listed no profile"
    offered = sorted({p["name"] for p in info["profiles"]})
    missing = [p for p in wanted if p not in offered]
    if missing:
        return FAIL, (
            f"layout {ctx.cfg['mig']['config']} names {', '.join(missing)}, which these GPUs do not offer "
            f"(they offer {', '.join(offered)})"
        )
    return PASS, f"every profile of layout {ctx.cfg['mig']['config']} is offered ({', '.join(wanted)})"


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
    info = ctx.read(DCGM_DIAG)
    level = (ctx.cfg.get("dcgm") or {}).get("diag_level")
    if not info["available"]:
        return FAIL, info["error"] or "dcgmi not found"
    failing = [t["name"] for t in info["tests"] if t["status"] == "fail"]
    if info["error"] and info["overall"] is None:
        return FAIL, f"dcgmi diag -r {level}: {info['error']}"
    if info["overall"] == "fail" or failing:
        return FAIL, f"dcgmi diag -r {level} failed: {', '.join(failing) or 'see dcgmi output'}"
    if info["overall"] is None:
        return FAIL, f"dcgmi diag -r {level} reported no results (exit {info['rc']})"
    return PASS, f"dcgmi diag -r {level}: {info['overall']}"


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

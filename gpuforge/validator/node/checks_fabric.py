"""Checks of the GPU fabric on one node: RDMA devices, ports, firmware, modules, nvidia-peermem and GPU-NIC affinity.

They read the health config's ``fabric`` section (``gpuforge.render.health_fabric``) and two readings:
``fabric.rdma`` (sysfs, in-process) and ``nvidia-smi topo -m`` (the ``topo`` input the GPU checks
read, parsed for its NIC columns by ``fabric.gpu_nic_topology``: one command, read once). A node of
a group without a fabric skips every one of them, saying so. ``fabric.ports`` leaves, per device it
passed, the port and GID index the pair test (``gpuforge.validator.cluster_fabric``) uses in the
node's data (:data:`PORTS_DATA`).
"""

from __future__ import annotations

from typing import Any

from gpuforge.probes.fabric import GPU_NIC_TOPOLOGY, NIC_LINKS, RdmaDevice, RdmaInfo, RdmaPort
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, WARNING, Config, Outcome
from gpuforge.validator.node.checks_gpu import expected_gpus
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import RDMA, TOPO

NO_FABRIC = "the node's group declares no fabric (node_groups[].fabric)"
PORTS_DATA = "fabric.ports"
#: ``nvidia-smi topo -m`` links that keep a GPU's RDMA traffic off the CPU interconnect (all but SYS).
NEAR_LINKS = tuple(link for link in NIC_LINKS if link != "SYS")
#: Names of software RDMA devices: Soft-RoCE (rdma_rxe: rdma-link(8)'s ``rxe_eth0``, rxe_cfg's ``rxe0``) and siw.
SOFTWARE_PREFIXES = ("rxe", "siw")
_ABSENT = "not listed"


def fabric_cfg(cfg: Config) -> dict[str, Any]:
    value = cfg.get("fabric")
    return value if isinstance(value, dict) else {}


def gate_fabric(cfg: Config) -> str | None:
    return None if fabric_cfg(cfg) else NO_FABRIC


def gate_firmware(cfg: Config) -> str | None:
    return gate_fabric(cfg) or (None if fabric_cfg(cfg).get("firmware") else "the spec pins no HCA firmware")


def gate_gpu_fabric(cfg: Config) -> str | None:
    return gate_fabric(cfg) or (None if expected_gpus(cfg) else "the spec declares no GPUs for this node")


def gate_peermem(cfg: Config) -> str | None:
    return gate_gpu_fabric(cfg) or (None if fabric_cfg(cfg).get("peermem") else "the spec's fabric.peermem is off")


def selected(cfg: Config, info: RdmaInfo) -> tuple[list[RdmaDevice], list[str]]:
    """(the node's devices the spec names, or all of them for ``hcas: all``; names it lacks)."""
    want = [str(n) for n in fabric_cfg(cfg).get("devices") or []]
    by_name = {d["name"]: d for d in info["devices"]}
    if want:
        return [by_name[n] for n in want if n in by_name], [n for n in want if n not in by_name]
    return list(info["devices"]), []


def _device_word(d: RdmaDevice) -> str:
    return d["name"] + (f" (fw {d['fw_ver']})" if d["fw_ver"] else "")


@check(
    "fabric.devices",
    "hardware",
    CRITICAL,
    "The RDMA devices the spec's fabric names are present (hcas: all: at least one)",
    needs=("rdma",),
    gate=gate_fabric,
)
def _devices(ctx: NodeContext) -> Outcome:
    info = ctx.read(RDMA)
    kind = fabric_cfg(ctx.cfg).get("type", "?")
    if not info["readable"]:
        return FAIL, f"cannot read the RDMA devices: {info['error'] or 'no answer'}"
    if not info["class_present"]:
        return FAIL, f"no /sys/class/infiniband (the RDMA core, ib_core, is not loaded); the spec declares {kind}"
    devices, missing = selected(ctx.cfg, info)
    have = ", ".join(d["name"] for d in info["devices"]) or "none"
    if missing:
        rxe = [n for n in missing if n.startswith("rxe_")]
        note = f" ({', '.join(rxe)}: Soft-RoCE device(s) of netdev {', '.join(n[4:] for n in rxe)})" if rxe else ""
        return FAIL, f"RDMA device(s) {', '.join(missing)} missing{note}; the node has: {have}"
    if not devices:
        return FAIL, f"no RDMA device in /sys/class/infiniband (hcas: all needs at least one; fabric {kind})"
    return PASS, f"{len(devices)} RDMA device(s): {', '.join(_device_word(d) for d in devices)}"


def _port_word(dev: str, p: RdmaPort) -> str:
    return f"{dev} port {p['port']} {p['state'] or '?'} {p['link_layer'] or '?'} {p['rate'] or '?'}"


def pick_gid(port: RdmaPort) -> tuple[int, str | None]:
    """The GID index perftest's ``-x`` takes, and its IPv4 address: an Ethernet (RoCE) port's first
    RoCE v2 IPv4-mapped GID, else its first RoCE v2 GID; index 0 otherwise (InfiniBand)."""
    if port["link_layer"] != "Ethernet":
        return 0, None
    v2 = [g for g in port["gids"] if (g["type"] or "") == "RoCE v2"]
    best = next((g for g in v2 if g["ipv4"]), v2[0] if v2 else None)
    return (best["index"], best["ipv4"]) if best else (0, None)


def _port_problem(p: RdmaPort, layer: str, rate: int | None) -> str | None:
    if p["state"] != "ACTIVE":
        return f"state {p['state'] or 'unknown'} ({p['phys_state'] or '?'})"
    if p["link_layer"] != layer:
        return f"link layer {p['link_layer'] or 'unknown'}, the spec's fabric needs {layer}"
    if rate and (p["rate_gbps"] is None or p["rate_gbps"] < rate):
        return f"rate {p['rate'] or 'unknown'}, below the spec's {rate} Gb/s"
    return None


@check(
    "fabric.ports",
    "hardware",
    CRITICAL,
    "Each fabric device has a port Active, of the fabric's link layer, at the spec's rate or faster",
    depends_on=("fabric.devices",),
    needs=("rdma",),
    gate=gate_fabric,
)
def _ports(ctx: NodeContext) -> Outcome:
    fab = fabric_cfg(ctx.cfg)
    layer, rate = str(fab.get("link_layer") or "?"), fab.get("link_rate_gbps")
    devices, _ = selected(ctx.cfg, ctx.read(RDMA))
    good, bad, chosen = [], [], {}
    for d in devices:
        problems = {p["port"]: _port_problem(p, layer, rate) for p in d["ports"]}
        ok = [p for p in d["ports"] if problems[p["port"]] is None]
        if not ok:
            why = "; ".join(f"port {n}: {w}" for n, w in problems.items()) or "no port in sysfs"
            bad.append(f"{d['name']}: {why}")
            continue
        port = ok[0]
        gid, ipv4 = pick_gid(port)
        netdev = d["netdevs"][0] if d["netdevs"] else next((g["ndev"] for g in port["gids"] if g["ndev"]), None)
        chosen[d["name"]] = {"port": port["port"], "gid_index": gid, "ipv4": ipv4, "netdev": netdev,
                             "link_layer": port["link_layer"], "rate_gbps": port["rate_gbps"]}  # fmt: skip
        good.append(_port_word(d["name"], port) + (f", GID {gid} {ipv4}" if ipv4 else ""))
    ctx.data[PORTS_DATA] = chosen
    if bad:
        return FAIL, "; ".join(bad) + (f" (fine: {'; '.join(good)})" if good else "")
    return PASS, "; ".join(good)


@check(
    "fabric.firmware",
    "driver",
    WARNING,
    "HCA firmware (fw_ver) is the version the spec pins",
    depends_on=("fabric.devices",),
    needs=("rdma",),
    gate=gate_firmware,
)
def _firmware(ctx: NodeContext) -> Outcome:
    pin = str(fabric_cfg(ctx.cfg).get("firmware"))
    devices, _ = selected(ctx.cfg, ctx.read(RDMA))
    hardware = [d for d in devices if not d["name"].startswith(SOFTWARE_PREFIXES)]
    if not hardware:
        return SKIP, "only software RDMA devices (Soft-RoCE): they have no firmware"
    wrong = [f"{d['name']} {d['fw_ver'] or 'unknown'}" for d in hardware if d["fw_ver"] != pin]
    if wrong:
        return FAIL, f"firmware {', '.join(wrong)}; the spec pins {pin}"
    return PASS, f"firmware {pin} on {', '.join(d['name'] for d in hardware)}, as pinned"


def _loaded(state: str | None) -> bool:
    return state in ("live", "builtin")


@check(
    "fabric.modules",
    "driver",
    CRITICAL,
    "The kernel modules the fabric layer loads are loaded (ib_uverbs, rdma_ucm; rdma_rxe, ib_ipoib, gdrdrv as used)",
    needs=("rdma",),
    gate=gate_fabric,
)
def _modules(ctx: NodeContext) -> Outcome:
    info = ctx.read(RDMA)
    if not info["readable"]:
        return FAIL, f"cannot read /sys/module: {info['error'] or 'no answer'}"
    want = [str(m) for m in fabric_cfg(ctx.cfg).get("modules") or []]
    states = {m: info["modules"].get(m, "absent") for m in want}
    missing = [f"{m} ({s})" for m, s in states.items() if not _loaded(s)]
    if missing:
        return FAIL, f"kernel module(s) not loaded: {', '.join(missing)}"
    return PASS, ", ".join(f"{m} {s}" for m, s in states.items()) or "no module required"


@check(
    "fabric.peermem",
    "driver",
    CRITICAL,
    "nvidia_peermem (GPUDirect RDMA) is loaded on GPU nodes whose fabric wants it",
    depends_on=("driver.module",),
    needs=("rdma",),
    gate=gate_peermem,
)
def _peermem(ctx: NodeContext) -> Outcome:
    info = ctx.read(RDMA)
    state = info["modules"].get("nvidia_peermem", "absent") if info["readable"] else None
    if state is None:
        return FAIL, f"cannot read /sys/module: {info['error'] or 'no answer'}"
    if not _loaded(state):
        return FAIL, f"nvidia_peermem is not loaded ({state}): GPUDirect RDMA is off"
    return PASS, f"nvidia_peermem {state}"


def _candidates(cfg: Config, nics: dict[str, str]) -> list[str] | str:
    """The NIC names affinity looks at, or why it cannot judge."""
    fab = fabric_cfg(cfg)
    want = [str(n) for n in fab.get("devices") or [] if not str(n).startswith(SOFTWARE_PREFIXES)]
    if fab.get("devices") and not want:
        return "the fabric's devices are software ones (Soft-RoCE: no PCI location to compare)"
    if want and not nics:
        return "nvidia-smi topo -m printed no NIC Legend to name the spec's devices"
    return want or list(nics.values())


@check(
    "fabric.affinity",
    "hardware",
    WARNING,
    "Each GPU has a fabric NIC near it (nvidia-smi topo -m: PIX, PXB, PHB or NODE, not SYS)",
    needs=("topo",),
    gate=gate_gpu_fabric,
)
def _affinity(ctx: NodeContext) -> Outcome:
    topo = GPU_NIC_TOPOLOGY.parse(ctx.out(TOPO.key))
    if not topo["available"] or topo["error"] or not topo["gpus"]:
        why = topo["error"] or "; ".join(topo["messages"]) or "no GPU row"
        return SKIP, f"nvidia-smi topo -m not readable ({why}): GPU-NIC affinity not judged"
    names = _candidates(ctx.cfg, topo["nics"])
    if isinstance(names, str):
        return SKIP, names
    near, far = [], []
    for gpu in topo["gpus"]:
        links = {n: topo["affinity"].get(gpu, {}).get(n) for n in names}
        ranked = sorted((NIC_LINKS.index(v), n, v) for n, v in links.items() if v in NIC_LINKS)
        if ranked and ranked[0][2] in NEAR_LINKS:
            near.append(f"{gpu} {ranked[0][1]} ({ranked[0][2]})")
        else:
            far.append(f"{gpu} ({', '.join(f'{n} {v or _ABSENT}' for n, v in links.items()) or 'no NIC'})")
    if far:
        return FAIL, f"{len(far)} GPU(s) without a near fabric NIC (only SYS, across NUMA nodes): {'; '.join(far)}"
    return PASS, f"each of {len(near)} GPU(s) has a near NIC: {', '.join(near)}"

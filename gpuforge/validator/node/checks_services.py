"""Checks of the scheduler, job runtime, monitoring exporters and secrets on the node."""

from __future__ import annotations

from gpuforge.probes.files import FileDigest
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, WARNING, Config, Outcome
from gpuforge.validator.node.checks_containers import gate_role, gate_slurm
from gpuforge.validator.node.checks_gpu import gate_gpu, unit_state_outcome
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import (
    DCGM_EXPORTER,
    MUNGE,
    MUNGE_KEY,
    NODE_EXPORTER,
    SLURMDBD_CONF,
    SRUN_HELP,
    SWAPS,
)


@check("scheduler.munge", "scheduler", CRITICAL, "munged runs and credentials round-trip",
       needs=("units", "munge"), gate=gate_slurm)  # fmt: skip
def _munge(ctx: NodeContext) -> Outcome:
    active, text = unit_state_outcome(ctx, "munge.service")
    if not active:
        return FAIL, text
    out = ctx.read(MUNGE)
    if out.missing:
        return FAIL, "munge client not installed"
    if not out.ok:
        return FAIL, f"munge -n | unmunge failed: {out.last_line() or out.error or f'exit {out.rc}'}"
    return PASS, "munge.service active; munge -n | unmunge works"


@check("scheduler.slurmd", "scheduler", CRITICAL, "slurmd runs", depends_on=("scheduler.munge",),
       needs=("units",), gate=gate_role("compute", "compute"))  # fmt: skip
def _slurmd(ctx: NodeContext) -> Outcome:
    active, text = unit_state_outcome(ctx, "slurmd.service")
    return (PASS if active else FAIL), text


@check("scheduler.slurmctld", "scheduler", CRITICAL, "slurmctld runs", depends_on=("scheduler.munge",),
       needs=("units",), gate=gate_role("controller", "controller"), health=False)  # fmt: skip
def _slurmctld(ctx: NodeContext) -> Outcome:
    active, text = unit_state_outcome(ctx, "slurmctld.service")
    return (PASS if active else FAIL), text


@check("scheduler.slurmdbd", "scheduler", CRITICAL, "slurmdbd and its database run",
       needs=("units",), gate=gate_role("accounting_db", "accounting"), health=False)  # fmt: skip
def _slurmdbd(ctx: NodeContext) -> Outcome:
    bad = []
    texts = []
    for unit in ("mariadb.service", "slurmdbd.service"):
        active, text = unit_state_outcome(ctx, unit)
        texts.append(text)
        if not active:
            bad.append(text)
    return (FAIL, "; ".join(bad)) if bad else (PASS, "; ".join(texts))


def gate_kubelet(cfg: Config) -> str | None:
    return None if cfg.get("kubernetes") else "not a Kubernetes node"


@check("scheduler.kubelet", "scheduler", CRITICAL, "kubelet runs", needs=("units",), gate=gate_kubelet)
def _kubelet(ctx: NodeContext) -> Outcome:
    active, text = unit_state_outcome(ctx, "kubelet.service")
    return (PASS if active else FAIL), text


@check("scheduler.k8s_swap_off", "scheduler", CRITICAL, "swap is off (kubelet will not run with swap on)",
       needs=("swaps",), gate=gate_kubelet)  # fmt: skip
def _k8s_swap_off(ctx: NodeContext) -> Outcome:
    swaps = ctx.read(SWAPS)
    if not swaps.readable:
        return FAIL, "cannot read /proc/swaps"
    if swaps.active:
        return FAIL, f"swap is on: {', '.join(swaps.active)} (swapoff -a; gpuforge apply keeps it off)"
    return PASS, "swap off"


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
    out = ctx.read(SRUN_HELP)
    if out.missing:
        return FAIL, "srun not installed"
    if any("--container-image" in line for line in out.lines):
        return PASS, "srun --help lists --container-image (pyxis loaded)"
    err = next((line.strip() for line in out.lines if "spank" in line.lower() or "error" in line.lower()), "")
    return FAIL, "srun --help does not list --container-image: pyxis not loaded" + (f" ({err})" if err else "")


# -- monitoring


def gate_node_exporter(cfg: Config) -> str | None:
    return None if (cfg.get("node_exporter") or {}).get("enabled") else "node-exporter is not enabled in the spec"


@check("monitoring.node_exporter", "monitoring", WARNING, "node-exporter answers with node_ metrics",
       needs=("node_exporter",), gate=gate_node_exporter)  # fmt: skip
def _node_exporter(ctx: NodeContext) -> Outcome:
    port = (ctx.cfg.get("node_exporter") or {}).get("port", 9100)
    info = ctx.read(NODE_EXPORTER)
    if info["error"] or info["rc"] != 0:
        return FAIL, f"node-exporter on :{port} does not answer: {info['error'] or 'no response'}"
    metrics = {name: m for name, m in info["metrics"].items() if m["samples"]}
    if not any(name.startswith("node_") for name in metrics):
        return FAIL, f":{port}/metrics answers but has no node_ metrics"
    scrape_errors = metrics.get("node_textfile_scrape_error", {"samples": []})["samples"]
    if any(sample["value"] == 1 for sample in scrape_errors):
        return FAIL, (
            f"node-exporter on :{port} could not read a file of its textfile directory "
            "(node_textfile_scrape_error 1): gpuforge's health and Slurm metrics may be missing"
        )
    return PASS, f"node-exporter on :{port} serves node_ metrics (textfile and time collectors)"


def gate_dcgm_exporter(cfg: Config) -> str | None:
    if gate_gpu(cfg):
        return gate_gpu(cfg)
    return None if (cfg.get("dcgm") or {}).get("exporter") else "dcgm-exporter does not run on this host"


@check("monitoring.dcgm_exporter", "monitoring", WARNING, "dcgm-exporter serves the expected DCGM metrics",
       depends_on=("driver.smi",), needs=("dcgm_exporter",), gate=gate_dcgm_exporter)  # fmt: skip
def _dcgm_exporter(ctx: NodeContext) -> Outcome:
    dcgm = ctx.cfg.get("dcgm") or {}
    port = dcgm.get("exporter_port", 9400)
    info = ctx.read(DCGM_EXPORTER)
    if info["error"] or info["rc"] != 0:
        return FAIL, f"dcgm-exporter on :{port} does not answer: {info['error'] or 'no response'}"
    names = {name for name, m in info["metrics"].items() if m["samples"]}
    missing = [c for c in dcgm.get("counters") or [] if c not in names]
    if not any(n.startswith("DCGM_") for n in names):
        return FAIL, f":{port}/metrics has no DCGM_ metrics"
    if missing:
        return FAIL, f"dcgm-exporter lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
    return PASS, f"dcgm-exporter on :{port} serves {sum(n.startswith('DCGM_') for n in names)} DCGM metrics"


# -- security


def _mode_text(info: FileDigest) -> str:
    return f"{info['mode']} {info['owner']}:{info['group']}"


@check("security.munge_key", "security", CRITICAL, "munge.key is 0400 munge:munge",
       needs=("munge_key",), gate=gate_slurm)  # fmt: skip
def _munge_key(ctx: NodeContext) -> Outcome:
    path = str((ctx.cfg.get("slurm") or {}).get("munge_key"))
    info = ctx.read(MUNGE_KEY).get(path)
    if info is None:
        return FAIL, f"{path} missing (or hidden from this user)"
    if info["sha256"]:
        ctx.data["security.munge_key"] = {"sha256": info["sha256"]}
    if (info["mode"], info["owner"], info["group"]) != ("0400", "munge", "munge"):
        return FAIL, f"{path} is {_mode_text(info)}, want 0400 munge:munge"
    if not info["sha256"]:
        return FAIL, f"{path} is not readable (no digest)"
    return PASS, f"{path} is 0400 munge:munge"


@check("security.slurmdbd_conf", "security", CRITICAL, "slurmdbd.conf (database password) is not world-readable",
       needs=("slurmdbd_conf",), gate=gate_role("accounting_db", "accounting"), health=False)  # fmt: skip
def _slurmdbd_conf(ctx: NodeContext) -> Outcome:
    path = str((ctx.cfg.get("slurm") or {}).get("slurmdbd_conf"))
    info = ctx.read(SLURMDBD_CONF).get(path)
    if info is None:
        return FAIL, f"{path} missing (or hidden from this user)"
    if int(info["mode"] or "0", 8) & 0o007:
        return FAIL, f"{path} is {_mode_text(info)}: open to every user (it holds the database password)"
    if info["owner"] != "slurm":
        return FAIL, f"{path} is {_mode_text(info)}, want owner slurm (slurmdbd refuses otherwise)"
    return PASS, f"{path} is {_mode_text(info)}"

"""Prometheus alert rules rendered from the spec, each with a ``runbook`` annotation.

GPU rules use dcgm-exporter's metric names (its ``etc/default-counters.csv``); the ECC
double-bit and NVLink error counters are commented out there (optional), so those rules
only fire where ``dcgm.counters`` lists them. Every alert carries ``severity`` and
``component`` labels; Alertmanager's inhibition keys on ``component="gpu"``.
"""

from __future__ import annotations

from typing import Any

from gpuforge.render.escape import promql_string
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.spec.xid_catalog import BY_CODE, CATALOG_URL, CRITICAL_XIDS


def _rule(
    alert: str, expr: str, for_: str, severity: str, component: str, summary: str, runbook: str, **labels: str
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": alert, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity, "component": component, **labels}
    rule["annotations"] = {"summary": summary, "runbook": runbook}
    return rule


def promql_regex_escape(text: str) -> str:
    """``text`` as a literal inside a PromQL (RE2) regular expression."""
    return "".join("\\" + c if c in r"\.^$*+?()[]{}|" else c for c in text)


def alert_xids(spec: Spec) -> list[int]:
    """The Xid codes that alert: the critical ones of the Xid table (those ``gpu.xid`` fails on),
    then the spec's own, each once."""
    return list(dict.fromkeys([*CRITICAL_XIDS, *spec.monitoring.alerts.xids]))


def xid_runbook(xid: int) -> str:
    """What the Xid table says of ``xid`` (meaning and action), or where to look it up."""
    row = BY_CODE.get(xid)
    return row.runbook() if row else f"Xid {xid} (listed in monitoring.alerts.xids): see {CATALOG_URL}"


def _node_rules(spec: Spec) -> list[dict[str, Any]]:
    lim = spec.monitoring.alerts
    fs = 'fstype!~"tmpfs|ramfs|devtmpfs|squashfs|overlay",mountpoint=~"/|/var|/var/lib(/.*)?"'
    return [
        _rule(
            "NodeDown",
            'up{job="node-exporter"} == 0',
            f"{lim.node_down_minutes}m",
            "critical",
            "node",
            "{{ $labels.node }} ({{ $labels.node_group }}) is unreachable: node-exporter does not answer",
            "Check power, network and sshd of the node (ipmitool chassis status, ping); "
            "'gpuforge validate --limit NODE' once it is back.",
        ),
        _rule(
            "DiskNearlyFull",
            f"100 * (1 - node_filesystem_avail_bytes{{{fs}}} / node_filesystem_size_bytes{{{fs}}}) "
            f"> {lim.disk_used_percent}",
            "10m",
            "warning",
            "node",
            "{{ $labels.mountpoint }} on {{ $labels.node }} is {{ $value | humanize }}% full",
            "Free space under the mount point (journal, /var/lib/slurm state, /var/lib/prometheus); "
            "Slurm and Prometheus stop writing state when it is full.",
        ),
    ]


def _health_rules(spec: Spec) -> list[dict[str, Any]]:
    minutes = spec.monitoring.alerts.check_failing_minutes
    return [
        _rule(
            "GpuforgeCheckFailing",
            'gpuforge_check_status{layer!="config"} == 0',
            f"{minutes}m",
            "critical",
            "gpuforge",
            "gpuforge check {{ $labels.check }} ({{ $labels.layer }}) fails on {{ $labels.node }}",
            "Run 'gpuforge-health' on the node to see the failure and its detail; fix that layer "
            "(or 'gpuforge apply --limit NODE'), the node resumes itself once every check passes.",
        ),
        _rule(
            "GpuforgeConfigDrift",
            'gpuforge_check_status{check="config.files_intact"} == 0',
            f"{minutes}m",
            "critical",
            "gpuforge",
            "files gpuforge manages on {{ $labels.node }} were changed by hand (the node drained itself)",
            "'gpuforge validate --limit NODE --checks config' names each file with a diff; 'gpuforge apply "
            "--limit NODE' restores them (or put the change in the spec), and the node resumes itself.",
        ),
        _rule(
            "GpuforgeRestartPending",
            'gpuforge_check_status{check="config.units_loaded"} == 0',
            f"{minutes}m",
            "warning",
            "gpuforge",
            "a unit gpuforge manages on {{ $labels.node }} changed on disk without a daemon-reload",
            "Run 'gpuforge-health' on the node to see the unit; 'gpuforge apply --limit NODE' reloads and "
            "restarts it (draining first where jobs run).",
        ),
    ]


def _gpu_rules(spec: Spec) -> list[dict[str, Any]]:
    """One rule per Xid the spec alerts on, then the memory, thermal, power and NVLink rules."""
    xids = [
        _rule(
            "GpuXidError",
            f"DCGM_FI_DEV_XID_ERRORS == {xid}",
            "0m",
            "critical",
            "gpu",
            f"Xid {xid} on GPU {{{{ $labels.gpu }}}} of {{{{ $labels.node }}}}",
            xid_runbook(xid),
            xid=str(xid),
        )
        for xid in alert_xids(spec)
    ]
    return xids + _gpu_health_rules(spec)


def _gpu_health_rules(spec: Spec) -> list[dict[str, Any]]:
    lim = spec.monitoring.alerts
    nvlink = " or ".join(
        f"increase(DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL[10m]) > 0"
        for kind in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
    )
    return [
        _rule(
            "GpuUncorrectableEcc",
            "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
            "0m",
            "critical",
            "gpu",
            "Uncorrectable (double-bit) ECC errors on GPU {{ $labels.gpu }} of {{ $labels.node }}",
            "Drain the node, reset the GPU (nvidia-smi -r); RMA if they repeat. "
            "Needs DCGM_FI_DEV_ECC_DBE_VOL_TOTAL in dcgm.counters (optional in dcgm-exporter).",
        ),
        _rule(
            "GpuRowRemapPending",
            "increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[1h]) > 0",
            "0m",
            "warning",
            "gpu",
            "Rows remapped for uncorrectable errors on GPU {{ $labels.gpu }} of {{ $labels.node }}",
            "The remap takes effect at the next GPU reset: drain the node and reset the GPU.",
        ),
        _rule(
            "GpuRowRemapFailed",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
            "0m",
            "critical",
            "gpu",
            "Row remapping failed on GPU {{ $labels.gpu }} of {{ $labels.node }}",
            "The GPU has no spare rows left: drain the node and RMA the GPU.",
        ),
        _rule(
            "GpuTemperatureHigh",
            f"DCGM_FI_DEV_GPU_TEMP > {lim.gpu_temp_c}",
            "5m",
            "warning",
            "gpu",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} at {{ $value }} C",
            "Check the node's fans, airflow and inlet temperature; the GPU throttles and may shut down.",
        ),
        _rule(
            "GpuPowerHigh",
            f"DCGM_FI_DEV_POWER_USAGE > {lim.gpu_power_w}",
            "5m",
            "warning",
            "gpu",
            "GPU {{ $labels.gpu }} of {{ $labels.node }} draws {{ $value }} W",
            "Check the power limit (nvidia-smi -q -d POWER) and the PSUs of the node.",
        ),
        _rule(
            "GpuNvlinkErrorsRising",
            nvlink,
            "0m",
            "warning",
            "gpu",
            "NVLink errors rising on GPU {{ $labels.gpu }} of {{ $labels.node }}",
            "Check the links (nvidia-smi nvlink -e) and fabric manager; reseat or RMA the board if they keep rising. "
            "Needs the DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL fields in dcgm.counters.",
        ),
    ]


def _slurm_rules(spec: Spec) -> list[dict[str, Any]]:
    lim = spec.monitoring.alerts
    ops = "|".join(promql_regex_escape(r) for r in lim.operator_reasons)
    not_ops = f",reason!~{promql_string(f'({ops}).*')}" if ops else ""
    rules = [
        _rule(
            "SlurmNodeUnavailable",
            f'gpuforge_slurm_node_state{{state=~"drain|down"{not_ops}}} == 1',
            "5m",
            "critical",
            "slurm",
            "Slurm node {{ $labels.slurm_node }} is {{ $labels.state }}: {{ $labels.reason }}",
            "Not drained by an operator: read the reason (sinfo -R); a 'gpuforge: health:' reason names the "
            "failing check, run gpuforge-health on the node. 'scontrol update nodename=N state=resume' once fixed.",
        ),
    ]
    for daemon, role in (("slurmctld", Role.CONTROLLER), ("slurmdbd", Role.ACCOUNTING_DB)):
        if any(n.has(role) for n in resolve_nodes(spec)):
            rules.append(
                _rule(
                    f"{daemon.capitalize()}Down",
                    f'gpuforge_slurm_daemon_up{{daemon="{daemon}"}} == 0',
                    "2m",
                    "critical",
                    "slurm",
                    f"{daemon} is not running on {{{{ $labels.node }}}}",
                    f"systemctl status {daemon}; journalctl -u {daemon} -n 100. "
                    "Check munge (munge -n | unmunge) and the state directory's disk.",
                )
            )
    return rules


def alert_rules(spec: Spec) -> dict[str, Any]:
    """Prometheus rule groups as data (GPU rules where the spec has GPUs, Slurm rules with Slurm)."""
    groups = [{"name": "gpuforge-node", "rules": _node_rules(spec)}]
    if spec.slurm is not None:
        groups.append({"name": "gpuforge-health", "rules": _health_rules(spec)})
        groups.append({"name": "gpuforge-slurm", "rules": _slurm_rules(spec)})
    if any(n.hardware.gpu is not None for n in resolve_nodes(spec)):
        groups.append({"name": "gpuforge-gpu", "rules": _gpu_rules(spec)})
    return {"groups": groups}

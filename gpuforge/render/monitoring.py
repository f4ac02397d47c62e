"""Monitoring configuration: scrape config, alert rules, Alertmanager, collectors' timers, dashboards.

Small pure functions, spec in, text out. Targets are node names (resolved through the
hosts file gpuforge manages); relabeling gives every series ``node`` (from the target),
``node_group`` and ``cluster`` labels. GPU alert rules use dcgm-exporter's metric names
(its ``etc/default-counters.csv``; fields marked *optional* there are commented out and
only exported when ``dcgm.counters`` lists them).
"""

from __future__ import annotations

import hashlib
import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from gpuforge.render.alert_rules import alert_rules
from gpuforge.render.escape import systemd_exec
from gpuforge.render.files import TEMPLATES_DIR, RenderedFile, Secrets, header, per_spec, render_template
from gpuforge.render.health import HEALTH_PROGRAM, wants_health
from gpuforge.render.nvidia import dump_yaml, host_dcgm_exporter
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.monitoring_packages import DEB_MONITORING
from gpuforge.spec.nodes import Node, resolve_nodes
from gpuforge.spec.redact import redact_webhook_urls

PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
PROMETHEUS_DEFAULTS = DEB_MONITORING.prometheus.defaults  # every platform row's (monitoring_packages)
PROMETHEUS_RULES = "/etc/prometheus/gpuforge-rules.yml"
ALERTMANAGER_CONFIG = "/etc/prometheus/alertmanager.yml"
ALERTMANAGER_DEFAULTS = DEB_MONITORING.alertmanager.defaults
NODE_EXPORTER_DEFAULTS = DEB_MONITORING.node_exporter.defaults
TEXTFILE_DIR = "/var/lib/gpuforge/textfile"
DASHBOARD_DIR = "/etc/gpuforge/dashboards"
DASHBOARD_SOURCES = TEMPLATES_DIR / "monitoring" / "dashboards"
SLURM_METRICS_PROGRAM = "/usr/local/sbin/gpuforge-slurm-metrics"
SLURM_METRICS_UNIT = "gpuforge-slurm-metrics"
HEALTH_METRICS_UNIT = "gpuforge-health-metrics"


def _header() -> str:
    return header().rstrip("\n")


def _unit_file(*paths: str) -> tuple[str, ...]:
    return tuple(f"/etc/systemd/system/{p}" for p in paths)


SLURM_METRICS_FILES = _unit_file(f"{SLURM_METRICS_UNIT}.service", f"{SLURM_METRICS_UNIT}.timer")
HEALTH_METRICS_FILES = _unit_file(f"{HEALTH_METRICS_UNIT}.service", f"{HEALTH_METRICS_UNIT}.timer")


# --------------------------------------------------------------------------- scrape targets


def _static_configs(spec: Spec, nodes: list[Node], port: int) -> list[dict[str, Any]]:
    """One static config per node group (declaration order), targets ``name:port``."""
    by_group: dict[str, list[str]] = {}
    for node in nodes:
        by_group.setdefault(node.group, []).append(f"{node.name}:{port}")
    return [
        {"targets": targets, "labels": {"node_group": group, "cluster": spec.cluster.name}}
        for group, targets in by_group.items()
    ]


def node_relabel() -> dict[str, Any]:
    """``node`` label from the target's host name (``node7:9100`` -> ``node7``)."""
    return {"source_labels": ["__address__"], "regex": "(.+):[0-9]+", "target_label": "node", "replacement": "$1"}


def node_exporter_targets(spec: Spec) -> list[str]:
    """``name:port`` of every node's node-exporter ([] when node-exporter is off)."""
    if not spec.monitoring.node_exporter:
        return []
    return [f"{n.name}:{spec.monitoring.node_exporter_port}" for n in resolve_nodes(spec)]


def dcgm_exporter_nodes(spec: Spec) -> list[Node]:
    """GPU nodes that run dcgm-exporter as a host service."""
    if not host_dcgm_exporter(spec):
        return []
    return [n for n in resolve_nodes(spec) if n.hardware.gpu is not None]


def dcgm_exporter_targets(spec: Spec) -> list[str]:
    """``name:port`` of every host dcgm-exporter."""
    return [f"{n.name}:{spec.dcgm.exporter_port}" for n in dcgm_exporter_nodes(spec)]


def monitoring_nodes(spec: Spec) -> list[Node]:
    """Nodes running Prometheus (and Alertmanager)."""
    if not spec.monitoring.prometheus:
        return []
    return [n for n in resolve_nodes(spec) if n.has(Role.MONITORING)]


def _job(spec: Spec, name: str, nodes: list[Node], port: int) -> dict[str, Any]:
    return {
        "job_name": name,
        "static_configs": _static_configs(spec, nodes, port),
        "relabel_configs": [node_relabel()],
    }


def prometheus_config(spec: Spec) -> dict[str, Any]:
    """Prometheus configuration as data."""
    mon = spec.monitoring
    prom_nodes = monitoring_nodes(spec)
    jobs = [_job(spec, "prometheus", prom_nodes, mon.prometheus_port)] if prom_nodes else []
    if mon.alertmanager and prom_nodes:
        jobs.append(_job(spec, "alertmanager", prom_nodes, mon.alertmanager_port))
    if mon.node_exporter:
        jobs.append(_job(spec, "node-exporter", resolve_nodes(spec), mon.node_exporter_port))
    gpu_nodes = dcgm_exporter_nodes(spec)
    if gpu_nodes:
        jobs.append(_job(spec, "dcgm-exporter", gpu_nodes, spec.dcgm.exporter_port))
    doc: dict[str, Any] = {
        "global": {
            "scrape_interval": mon.scrape_interval,
            "evaluation_interval": mon.scrape_interval,
            "external_labels": {"cluster": spec.cluster.name},
        },
        "rule_files": [PROMETHEUS_RULES],
    }
    if mon.alertmanager and prom_nodes:
        targets = [f"{n.name}:{mon.alertmanager_port}" for n in prom_nodes]
        doc["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": targets}]}]}
    doc["scrape_configs"] = jobs
    return doc


@per_spec
def prometheus_yml(spec: Spec) -> str:
    """/etc/prometheus/prometheus.yml (Debian's prometheus package path)."""
    return header() + dump_yaml(prometheus_config(spec))


@per_spec
def prometheus_defaults(spec: Spec) -> str:
    """/etc/default/prometheus: listen port and retention."""
    mon = spec.monitoring
    args = f"--web.listen-address=:{mon.prometheus_port} --storage.tsdb.retention.time={mon.retention}"
    return render_template("monitoring/prometheus-defaults.j2", header=_header(), args=args)


@per_spec
def node_exporter_defaults(spec: Spec) -> str:
    """/etc/default/prometheus-node-exporter: listen port and textfile collector directory."""
    args = f"--web.listen-address=:{spec.monitoring.node_exporter_port} --collector.textfile.directory={TEXTFILE_DIR}"
    return render_template("monitoring/node-exporter-defaults.j2", header=_header(), args=args)


@per_spec
def prometheus_rules(spec: Spec) -> str:
    return header() + dump_yaml(alert_rules(spec))


# --------------------------------------------------------------------------- Alertmanager


def alertmanager_config(spec: Spec) -> dict[str, Any]:
    """Every alert to every receiver; NodeDown silences that node's GPU alerts."""
    mon = spec.monitoring
    receivers: list[dict[str, Any]] = [{"name": "gpuforge-all"}]
    configs = receivers[0]
    for r in mon.receivers:
        if r.webhook_url:
            configs.setdefault("webhook_configs", []).append({"url": r.webhook_url, "send_resolved": True})
        if r.email:
            configs.setdefault("email_configs", []).append({"to": r.email, "send_resolved": True})
    doc: dict[str, Any] = {}
    if mon.smtp_smarthost and mon.smtp_from:
        doc["global"] = {"smtp_smarthost": mon.smtp_smarthost, "smtp_from": mon.smtp_from}
    doc["route"] = {
        "receiver": "gpuforge-all",
        "group_by": ["alertname", "cluster", "node"],
        "group_wait": mon.group_wait,
        "group_interval": mon.group_interval,
        "repeat_interval": mon.repeat_interval,
    }
    doc["receivers"] = receivers
    doc["inhibit_rules"] = [
        {
            "source_matchers": ['alertname="NodeDown"'],
            "target_matchers": ['component="gpu"'],
            "equal": ["cluster", "node"],
        }
    ]
    return doc


@per_spec
def alertmanager_yml(spec: Spec) -> str:
    return header() + dump_yaml(alertmanager_config(spec))


@per_spec
def alertmanager_defaults(spec: Spec) -> str:
    """/etc/default/prometheus-alertmanager: config, port; no gossip cluster (one per monitoring node)."""
    args = (
        f"--config.file={ALERTMANAGER_CONFIG} --web.listen-address=:{spec.monitoring.alertmanager_port} "
        "--cluster.listen-address="
    )
    return render_template("monitoring/alertmanager-defaults.j2", header=_header(), args=args)


# --------------------------------------------------------------------------- collectors (systemd timers)


def slurm_metrics_args(spec: Spec, node: Node) -> list[str] | None:
    """Arguments of the Slurm collector on ``node`` (None: it runs none)."""
    if spec.slurm is None or not spec.monitoring.node_exporter:
        return None
    daemons = [d for d, role in (("slurmctld", Role.CONTROLLER), ("slurmdbd", Role.ACCOUNTING_DB)) if node.has(role)]
    if not daemons:
        return None
    args = [f"--out={TEXTFILE_DIR}/slurm.prom", f"--daemons={','.join(daemons)}"]
    return ["--queue", *args] if node.has(Role.CONTROLLER) else args


def health_metrics(spec: Spec, node: Node) -> bool:
    """Whether ``node`` exports its health checks (the health layer runs there, node-exporter is on)."""
    return (
        spec.slurm is not None
        and spec.slurm.health_check.enabled
        and spec.monitoring.node_exporter
        and wants_health(spec, node)
    )


def first_run_s(node_name: str, unit: str, interval: int) -> int:
    """Seconds from a collector timer's start to its first run: 10, plus a share of the interval
    fixed by the node's name and the unit. Nodes whose timers start together (one apply, one
    power-on) then run spread over the interval, not all in the same second; each keeps its phase
    (``OnUnitActiveSec`` counts from its own last run) and its file never changes on a re-render."""
    digest = hashlib.sha256(f"{unit}\0{node_name}".encode()).digest()
    return 10 + int.from_bytes(digest[:4], "big") % interval


def _timer_files(spec: Spec, node: Node, unit: str, description: str, argv: list[str]) -> list[RenderedFile]:
    interval = spec.monitoring.slurm_collector_interval
    service = render_template(
        "monitoring/collector.service.j2",
        header=_header(),
        description=description,
        command=systemd_exec(argv),
        timeout=max(interval - 5, 5),
    )
    timer = render_template(
        "monitoring/collector.timer.j2",
        header=_header(),
        description=description,
        interval=interval,
        first_run=first_run_s(node.name, unit, interval),
    )
    return [
        RenderedFile(f"/etc/systemd/system/{unit}.service", service),
        RenderedFile(f"/etc/systemd/system/{unit}.timer", timer),
    ]


# --------------------------------------------------------------------------- dashboards


def _set_datasource(value: Any, name: str) -> Any:
    if isinstance(value, dict):
        return {k: (name if k == "datasource" else _set_datasource(v, name)) for k, v in value.items()}
    if isinstance(value, list):
        return [_set_datasource(v, name) for v in value]
    return value


def dashboard_names() -> list[str]:
    return sorted(p.stem for p in DASHBOARD_SOURCES.glob("*.json"))


def dashboard(spec: Spec, name: str) -> str:
    """A Grafana dashboard of the repository with every ``datasource`` set to the spec's."""
    doc = json.loads((DASHBOARD_SOURCES / f"{name}.json").read_text())
    return json.dumps(_set_datasource(doc, spec.monitoring.grafana_datasource), indent=2) + "\n"


def dashboard_exprs(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard's panels."""
    return [t["expr"] for p in doc.get("panels", []) for t in p.get("targets", []) if "expr" in t]


# --------------------------------------------------------------------------- per node


def slurm_metrics_program() -> bytes:
    """The Slurm collector (``gpuforge.probes.slurm_metrics``, stdlib only), byte for byte."""
    spec = find_spec("gpuforge.probes.slurm_metrics")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_bytes()


def monitoring_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """node-exporter arguments and collector timers on every node; Prometheus, rules,
    Alertmanager and dashboards on monitoring nodes."""
    del secrets  # none from the store; webhook URLs are credentials: 0640, and shown cut (redact_webhook_urls)
    mon = spec.monitoring
    files: list[RenderedFile] = []
    if mon.node_exporter:
        files.append(RenderedFile(NODE_EXPORTER_DEFAULTS, node_exporter_defaults(spec)))
    args = slurm_metrics_args(spec, node)
    if args is not None:
        command = ["/usr/bin/python3", SLURM_METRICS_PROGRAM, *args]
        files.append(RenderedFile(SLURM_METRICS_PROGRAM, slurm_metrics_program(), mode="0755"))
        files += _timer_files(spec, node, SLURM_METRICS_UNIT, "gpuforge Slurm metrics for node-exporter", command)
    if health_metrics(spec, node):
        command = [HEALTH_PROGRAM, "--no-slurm", "--prom", f"{TEXTFILE_DIR}/gpuforge-health.prom"]
        files += _timer_files(spec, node, HEALTH_METRICS_UNIT, "gpuforge health checks for node-exporter", command)
    if mon.prometheus and node.has(Role.MONITORING):
        files.append(RenderedFile(PROMETHEUS_CONFIG, prometheus_yml(spec)))
        files.append(RenderedFile(PROMETHEUS_DEFAULTS, prometheus_defaults(spec)))
        files.append(RenderedFile(PROMETHEUS_RULES, prometheus_rules(spec)))
        if mon.alertmanager:
            files.append(
                RenderedFile(
                    ALERTMANAGER_CONFIG, alertmanager_yml(spec), "0640", group="prometheus", redact=redact_webhook_urls
                )
            )
            files.append(RenderedFile(ALERTMANAGER_DEFAULTS, alertmanager_defaults(spec)))
        files += [RenderedFile(f"{DASHBOARD_DIR}/{name}.json", dashboard(spec, name)) for name in dashboard_names()]
    return files

"""Monitoring configuration: Prometheus scrape config and node-exporter arguments.

Small pure functions, spec in, text out. Targets are node names (resolved through the
hosts file gpuforge manages), grouped by node group so that every series carries a
``group`` label.
"""

from __future__ import annotations

from typing import Any

from gpuforge.render.files import RenderedFile, Secrets, header, per_spec, render_template
from gpuforge.render.nvidia import dump_yaml, host_dcgm_exporter
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.nodes import Node, resolve_nodes

PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
TEXTFILE_DIR = "/var/lib/gpuforge/textfile"


def _header() -> str:
    return header().rstrip("\n")


def _static_configs(spec: Spec, nodes: list[Node], port: int) -> list[dict[str, Any]]:
    """One static config per node group (declaration order), targets ``name:port``."""
    by_group: dict[str, list[str]] = {}
    for node in nodes:
        by_group.setdefault(node.group, []).append(f"{node.name}:{port}")
    return [{"targets": targets, "labels": {"group": group}} for group, targets in by_group.items()]


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


def prometheus_config(spec: Spec) -> dict[str, Any]:
    """Prometheus configuration as data."""
    mon = spec.monitoring
    jobs: list[dict[str, Any]] = [
        {"job_name": "prometheus", "static_configs": [{"targets": [f"localhost:{mon.prometheus_port}"]}]}
    ]
    if mon.node_exporter:
        jobs.append(
            {
                "job_name": "node-exporter",
                "static_configs": _static_configs(spec, resolve_nodes(spec), mon.node_exporter_port),
            }
        )
    gpu_nodes = dcgm_exporter_nodes(spec)
    if gpu_nodes:
        jobs.append(
            {
                "job_name": "dcgm-exporter",
                "static_configs": _static_configs(spec, gpu_nodes, spec.dcgm.exporter_port),
            }
        )
    return {
        "global": {
            "scrape_interval": mon.scrape_interval,
            "evaluation_interval": mon.scrape_interval,
            "external_labels": {"cluster": spec.cluster.name},
        },
        "scrape_configs": jobs,
    }


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


def monitoring_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """node-exporter arguments on every node; Prometheus files on monitoring nodes."""
    del secrets  # no secrets in this layer
    files: list[RenderedFile] = []
    if spec.monitoring.node_exporter:
        files.append(RenderedFile(NODE_EXPORTER_DEFAULTS, node_exporter_defaults(spec)))
    if spec.monitoring.prometheus and node.has(Role.MONITORING):
        files.append(RenderedFile(PROMETHEUS_CONFIG, prometheus_yml(spec)))
        files.append(RenderedFile(PROMETHEUS_DEFAULTS, prometheus_defaults(spec)))
    return files

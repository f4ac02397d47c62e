"""Monitoring: node-exporter on every node, Prometheus on monitoring nodes (Debian packages)."""

from __future__ import annotations

from pyinfra.api import deploy

from deploys.context import node, run_as_cli_deploy, secrets, spec
from gpuforge.converge import Directory, Layer, Service
from gpuforge.operations.layer import converge
from gpuforge.render.files import RenderedFile
from gpuforge.render.monitoring import monitoring_files
from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node
from roles import deploys_for

NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
PROMETHEUS_YML = "/etc/prometheus/prometheus.yml"
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"
TEXTFILE_DIR = "/var/lib/gpuforge/textfile"


def node_exporter_layer(files: list[RenderedFile]) -> Layer:
    return Layer(
        "node-exporter",
        packages=("prometheus-node-exporter",),
        directories=(Directory("/var/lib/gpuforge", "0755"), Directory(TEXTFILE_DIR, "0755")),
        files=[f for f in files if f.path == NODE_EXPORTER_DEFAULTS],
        services=(Service("prometheus-node-exporter", restart_on=(NODE_EXPORTER_DEFAULTS,)),),
    )


def prometheus_layer(files: list[RenderedFile]) -> Layer:
    return Layer(
        "prometheus",
        packages=("prometheus",),
        files=[f for f in files if f.path in (PROMETHEUS_YML, PROMETHEUS_DEFAULTS)],
        services=(
            Service(
                "prometheus",
                restart_on=(PROMETHEUS_DEFAULTS,),
                reload_on=(PROMETHEUS_YML,),
                reload_command="systemctl reload prometheus",
            ),
        ),
    )


def monitoring_layers(s: Spec, n: Node, wanted: bool) -> tuple[Layer, Layer]:
    files = monitoring_files(s, n, secrets()) if wanted else []
    exporter = node_exporter_layer(files) if wanted and s.monitoring.node_exporter else Layer.empty("node-exporter")
    prom_on = wanted and s.monitoring.prometheus and n.has(Role.MONITORING)
    return exporter, prometheus_layer(files) if prom_on else Layer.empty("prometheus")


@deploy("gpuforge monitoring")
def monitoring() -> None:
    n = node()
    exporter, prometheus = monitoring_layers(spec(), n, "monitoring" in deploys_for(n))
    converge(name="monitoring: node-exporter", layer=exporter)
    converge(name="monitoring: prometheus", layer=prometheus)


if run_as_cli_deploy(globals()):
    monitoring()

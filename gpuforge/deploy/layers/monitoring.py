"""Monitoring: node-exporter and collector timers on every node; Prometheus (+ rules),
Alertmanager and dashboards on monitoring nodes: the packages and units of the node's platform row
(``Distribution.monitoring``: Debian's archive names, or EPEL 9's on EL 9).

A change of the scrape config or of the alert rules reloads Prometheus (SIGHUP through
``systemctl reload``), never restarts it; Alertmanager likewise reloads on its config.
"""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, spec
from gpuforge.deploy.converge import Directory, Layer, Service
from gpuforge.deploy.operations.layer import converge
from gpuforge.render import monitoring as mon
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.spec import Role, Spec
from gpuforge.spec.monitoring_packages import MonitoringPackage
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for

NODE_EXPORTER_DEFAULTS = mon.NODE_EXPORTER_DEFAULTS
PROMETHEUS_YML = mon.PROMETHEUS_CONFIG
PROMETHEUS_DEFAULTS = mon.PROMETHEUS_DEFAULTS
PROMETHEUS_RULES = mon.PROMETHEUS_RULES
TEXTFILE_DIR = mon.TEXTFILE_DIR


def _of(files: list[RenderedFile], *paths: str) -> list[RenderedFile]:
    return [f for f in files if f.path in paths]


def node_exporter_layer(files: list[RenderedFile], row: MonitoringPackage) -> Layer:
    return Layer(
        "node-exporter",
        packages=(row.package,),
        directories=(Directory("/var/lib/gpuforge", "0755"), Directory(TEXTFILE_DIR, "0755")),
        files=_of(files, row.defaults),
        services=(Service(row.unit, restart_on=(row.defaults,)),),
    )


def collectors_layer(files: list[RenderedFile]) -> Layer:
    """Timers writing textfiles: the Slurm collector (+ its program) and the health export."""
    slurm = _of(files, *mon.SLURM_METRICS_FILES)
    health = _of(files, *mon.HEALTH_METRICS_FILES)
    if not slurm and not health:
        return Layer.empty("collectors")
    services: list[Service] = []
    layer_files: list[RenderedFile] = []
    if slurm:
        layer_files += [*_of(files, mon.SLURM_METRICS_PROGRAM), *slurm]
        services.append(Service(f"{mon.SLURM_METRICS_UNIT}.timer", restart_on=mon.SLURM_METRICS_FILES))
    if health:
        layer_files += health
        services.append(Service(f"{mon.HEALTH_METRICS_UNIT}.timer", restart_on=mon.HEALTH_METRICS_FILES))
    return Layer(
        "collectors",
        directories=(Directory("/var/lib/gpuforge", "0755"), Directory(TEXTFILE_DIR, "0755")),
        files=layer_files,
        services=tuple(services),
    )


def prometheus_layer(files: list[RenderedFile], row: MonitoringPackage) -> Layer:
    return Layer(
        "prometheus",
        packages=(row.package,),
        files=_of(files, PROMETHEUS_YML, row.defaults, PROMETHEUS_RULES)
        + [f for f in files if f.path.startswith(mon.DASHBOARD_DIR + "/")],
        services=(
            Service(
                row.unit,
                restart_on=(row.defaults,),
                reload_on=(PROMETHEUS_YML, PROMETHEUS_RULES),
                reload_command=f"systemctl reload {row.unit}",
            ),
        ),
    )


def alertmanager_layer(files: list[RenderedFile], row: MonitoringPackage) -> Layer:
    return Layer(
        "alertmanager",
        packages=(row.package,),
        files=_of(files, mon.ALERTMANAGER_CONFIG, row.defaults),
        services=(
            Service(
                row.unit,
                restart_on=(row.defaults,),
                reload_on=(mon.ALERTMANAGER_CONFIG,),
                reload_command=f"systemctl reload {row.unit}",
            ),
        ),
    )


def monitoring_layers(s: Spec, n: Node, wanted: bool) -> tuple[Layer, Layer, Layer, Layer]:
    """(node-exporter, collectors, prometheus, alertmanager); empty layers where off. Packages and units
    are the node's platform row's (``Distribution.monitoring``)."""
    files = mon.monitoring_files(s, n, Secrets.redacted()) if wanted else []  # the layer has no secrets
    row = n.os.distribution.monitoring
    on = wanted and s.monitoring.node_exporter
    exporter = node_exporter_layer(files, row.node_exporter) if on else Layer.empty("node-exporter")
    prom_on = wanted and s.monitoring.prometheus and n.has(Role.MONITORING)
    prometheus = prometheus_layer(files, row.prometheus) if prom_on else Layer.empty("prometheus")
    am_on = prom_on and s.monitoring.alertmanager
    alertmanager = alertmanager_layer(files, row.alertmanager) if am_on else Layer.empty("alertmanager")
    return exporter, collectors_layer(files), prometheus, alertmanager


@deploy("gpuforge monitoring")
def monitoring() -> None:
    n = node()
    exporter, collectors, prometheus, alertmanager = monitoring_layers(spec(), n, "monitoring" in deploys_for(n))
    converge(name="monitoring: node-exporter", layer=exporter)
    converge(name="monitoring: collectors", layer=collectors)
    converge(name="monitoring: alertmanager", layer=alertmanager)
    converge(name="monitoring: prometheus", layer=prometheus)

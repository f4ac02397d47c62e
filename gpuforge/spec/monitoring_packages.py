"""The monitoring packages each distribution ships: node-exporter, Prometheus and Alertmanager, one row
per package family (a field of ``platforms.Distribution``).

Debian and Ubuntu ship ``prometheus-node-exporter``, ``prometheus`` and ``prometheus-alertmanager``.
EL 9 (RHEL, Rocky, Alma) gets all three from EPEL 9 under Fedora's names (``node-exporter``,
``golang-github-prometheus``, ``golang-github-prometheus-alertmanager``); Fedora's specs keep Debian's
unit names and argument files (their ``defaults-paths.patch``, ``%{_sysconfdir}/default/<shortname>``),
so only the package names and where they come from differ. Citations: ``platform_sources.SOURCES``
under each row's ``sources``.

Invariants: a row with ``epel`` set needs CodeReady Builder and EPEL enabled before it installs
(``render.nvidia_repos.epel_monitoring``); unit names and argument files are the same in every row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MonitoringPackage:
    """One component's package, the systemd unit it installs and the file that unit reads ARGS from."""

    package: str
    unit: str
    defaults: str  # the EnvironmentFile with ARGS= (gpuforge renders it)


@dataclass(frozen=True)
class MonitoringPackages:
    """The three monitoring components of one package family."""

    node_exporter: MonitoringPackage
    prometheus: MonitoringPackage
    alertmanager: MonitoringPackage
    epel: bool  # the packages are EPEL's (CodeReady Builder and EPEL first)
    sources: tuple[str, ...]


_NODE_EXPORTER = ("prometheus-node-exporter", "/etc/default/prometheus-node-exporter")
_PROMETHEUS = ("prometheus", "/etc/default/prometheus")
_ALERTMANAGER = ("prometheus-alertmanager", "/etc/default/prometheus-alertmanager")

#: Debian 12, Ubuntu 22.04 and 24.04: the archive's packages.
DEB_MONITORING = MonitoringPackages(
    MonitoringPackage("prometheus-node-exporter", *_NODE_EXPORTER),
    MonitoringPackage("prometheus", *_PROMETHEUS),
    MonitoringPackage("prometheus-alertmanager", *_ALERTMANAGER),
    epel=False,
    sources=(),
)

#: RHEL 9, Rocky 9, Alma 9: EPEL 9's packages (Fedora's specs).
EPEL9_MONITORING = MonitoringPackages(
    MonitoringPackage("node-exporter", *_NODE_EXPORTER),
    MonitoringPackage("golang-github-prometheus", *_PROMETHEUS),
    MonitoringPackage("golang-github-prometheus-alertmanager", *_ALERTMANAGER),
    epel=True,
    sources=("epel-node-exporter", "epel-prometheus", "epel-alertmanager"),
)

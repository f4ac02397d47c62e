"""The monitoring rows of the platform table (``spec.monitoring_packages``): cited, and the units and
argument files gpuforge renders are every row's."""

from __future__ import annotations

import pytest

from gpuforge.render import monitoring as mon
from gpuforge.spec.monitoring_packages import DEB_MONITORING, EPEL9_MONITORING
from gpuforge.spec.platform_sources import SOURCES
from gpuforge.spec.platforms import DISTRIBUTIONS, OsFamily


@pytest.mark.parametrize("os", list(OsFamily))
def test_each_distribution_names_its_familys_monitoring_row(os: OsFamily) -> None:
    want = DEB_MONITORING if DISTRIBUTIONS[os].package_format.value == "deb" else EPEL9_MONITORING
    assert DISTRIBUTIONS[os].monitoring is want
    assert set(want.sources) <= set(DISTRIBUTIONS[os].sources) and set(want.sources) <= set(SOURCES)


def test_epel9_row_is_epels_names_with_debians_units_and_argument_files() -> None:
    el, deb = EPEL9_MONITORING, DEB_MONITORING
    assert el.epel and not deb.epel
    names = (el.node_exporter.package, el.prometheus.package, el.alertmanager.package)
    assert names == ("node-exporter", "golang-github-prometheus", "golang-github-prometheus-alertmanager")
    for a, b in ((el.node_exporter, deb.node_exporter), (el.prometheus, deb.prometheus),
                 (el.alertmanager, deb.alertmanager)):  # fmt: skip
        assert (a.unit, a.defaults) == (b.unit, b.defaults)
    rendered = (mon.NODE_EXPORTER_DEFAULTS, mon.PROMETHEUS_DEFAULTS, mon.ALERTMANAGER_DEFAULTS)
    assert rendered == (el.node_exporter.defaults, el.prometheus.defaults, el.alertmanager.defaults)
    assert "node-exporter" in SOURCES["epel-node-exporter"].section
    assert "EPEL 9" in SOURCES["epel-prometheus"].section and "EPEL 9" in SOURCES["epel-alertmanager"].section

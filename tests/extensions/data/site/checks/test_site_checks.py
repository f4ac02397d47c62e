"""Site checks as a site writes them with testinfra (run by `gpuforge validate`, tests/extensions).

Two pass on a node the site role converged, one fails (a file nobody made), one errors (its fixture raises).
"""

import pytest


def test_site_marker_file(host):
    f = host.file("/etc/gpuforge-site.conf")
    assert f.exists and f.mode == 0o640
    assert f.content_string == "site=lab\n"


def test_site_sysctl_configured(host):
    assert host.file("/etc/sysctl.d/90-site.conf").contains("^net.ipv4.tcp_keepalive_time = 600$")


def test_site_requires_a_file_nobody_made(host):
    assert host.file("/etc/site-required.conf").exists, "/etc/site-required.conf is missing"


@pytest.fixture
def site_inventory_record():
    raise RuntimeError("the site inventory service did not answer")


def test_site_inventory_matches(host, site_inventory_record):
    assert site_inventory_record == host.backend.get_hostname()

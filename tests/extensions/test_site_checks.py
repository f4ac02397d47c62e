"""Site testinfra checks without a cluster: JUnit in, report results out; selection; ssh_config (issue 15)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.spec import parse_spec
from gpuforge.spec.extensions import TestinfraChecks
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.validator.runner import _site_selection
from gpuforge.validator.site_checks import results_from_junit, ssh_config_text
from tests.conftest import LAB_SPEC

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="test_site" name="test_ok[ssh://node2]" time="0.5"/>
<testcase classname="test_site" name="test_param[ssh://node2-a b]" time="0.1"/>
<testcase classname="test_site" name="test_bad[ssh://node2]" time="0.2">
  <failure message="AssertionError: /etc/x is missing&#10;assert False">trace</failure></testcase>
<testcase classname="test_site" name="test_err[ssh://node2]" time="0.0">
  <error message="failed on setup with &quot;RuntimeError: down&quot;">trace</error></testcase>
<testcase classname="sub.test_more" name="test_skip[ssh://node2]" time="0.0">
  <skipped type="pytest.skip" message="not on this OS">skip</skipped></testcase>
</testsuite></testsuites>"""


def test_junit_results_keep_pass_fail_error_and_skip_apart() -> None:
    got = [(r.id, r.layer, r.status, r.message) for r in results_from_junit(JUNIT, "node2")]
    assert got == [
        ("site.test_site__test_ok", "site", "pass", "passed"),
        ("site.test_site__test_param_a_b", "site", "pass", "passed"),
        ("site.test_site__test_bad", "site", "fail", "AssertionError: /etc/x is missing assert False"),
        ("site.test_site__test_err", "site", "error", 'failed on setup with "RuntimeError: down"'),
        ("site.test_more__test_skip", "site", "skip", "not on this OS"),
    ]


def test_site_tokens_select_and_exclude_the_site_layer() -> None:
    assert _site_selection(None, None) == (True, None, None)
    assert _site_selection("site", None) == (True, ["connection.ssh"], None)
    assert _site_selection("driver,site.*", None) == (True, ["driver"], None)
    assert _site_selection("driver", None) == (False, ["driver"], None)
    assert _site_selection(None, "site,scheduler.node_state") == (False, None, ["scheduler.node_state"])


def test_ssh_config_checks_host_keys_with_the_specs_known_hosts() -> None:
    spec = parse_spec(LAB_SPEC.read_text())
    node = next(n for n in resolve_nodes(spec) if n.name == "node2")
    text = ssh_config_text(spec, node, "10.213.0.12", 22, "root", spec.ssh.key)
    assert text.splitlines() == [
        "Host node2",
        "  HostName 10.213.0.12",
        "  Port 22",
        "  User root",
        "  BatchMode yes",
        "  StrictHostKeyChecking yes",
        "  ConnectTimeout 10",
        '  UserKnownHostsFile "/var/lib/gpuforge/lab/gflab/known_hosts"',
        '  IdentityFile "/var/lib/gpuforge/lab/gflab/id_ed25519"',
        "  IdentitiesOnly yes",
    ]


def test_without_testinfra_each_entry_is_an_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib.util

    from gpuforge.validator import site_checks

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "testinfra" else real(name, *a))
    spec = parse_spec(LAB_SPEC.read_text())
    node = resolve_nodes(spec)[0]
    [result] = site_checks.run_checks(spec, tmp_path, node, TestinfraChecks(path="checks"), ("h", 22, "root", None))
    assert (result.id, result.status) == ("site.checks__run", "error")
    assert "pip install 'gpuforge[testinfra]'" in result.message

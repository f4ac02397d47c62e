"""A site's Ansible role through ansible-runner on real lab nodes, from the spec (issue 15).

The role (tests/extensions/data/site) makes a group, a file and a sysctl. First apply: changed
and reported per node; second apply: nothing changed; a changed variable shows as a check-mode
diff in ``plan`` and changes nothing; a task that fails on one node fails that node only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.lab

DATA = Path(__file__).parent / "data" / "site"


def _site_spec(c: Any, name: str, **vars: Any) -> Path:
    target = c.workdir / "site"
    if not target.exists():
        shutil.copytree(DATA, target)
    step = {"name": "baseline", "role": "site/roles/site_baseline", "after": "base", "targets": ["workers"]}
    if vars:
        step["vars"] = vars
    return c.write(name, mutate=lambda d: d.update(site={"ansible": [step]}))


def test_site_role_converges_reports_and_plans(lab_cluster: Any) -> None:
    c = lab_cluster
    spec = _site_spec(c, "site.yaml")
    first = c.apply(spec)
    assert first["returncode"] == 0 and first["ok"], first
    for node in ("node2", "node3"):
        changed = first["hosts"][node]["changed"]
        assert "ansible baseline: site group" in changed, changed
        assert "ansible baseline: site marker file" in changed, changed
        assert "ansible baseline: load site sysctl" in changed, changed
        assert c.ssh(node, "getent group sitegrp").startswith("sitegrp:x:2500:")
        assert c.ssh(node, "stat -c '%a %G' /etc/gpuforge-site.conf").strip() == "640 sitegrp"
        assert c.ssh(node, "cat /etc/sysctl.d/90-site.conf") == "net.ipv4.tcp_keepalive_time = 600\n"
    # node1 is not a target: the role never ran there.
    assert not any(ch.startswith("ansible ") for ch in first["hosts"]["node1"]["changed"])
    assert c.ssh("node1", "test -e /etc/gpuforge-site.conf && echo yes || echo no").strip() == "no"

    again = c.apply(spec)
    assert again["returncode"] == 0 and again["ok"], again
    assert {n: h["changed"] for n, h in again["hosts"].items()} == {"node1": [], "node2": [], "node3": []}

    plan = c.plan(_site_spec(c, "site-renamed.yaml", site_name="lab2"))
    assert plan["ok"], plan
    for node in ("node2", "node3"):
        ops = [op for op in plan["hosts"][node]["operations"] if op["layer"] == "ansible baseline"]
        assert [s["summary"] for op in ops for s in op["steps"]] == ["ansible baseline: site marker file"], ops
        diff = "".join(d for op in ops for d in op["diffs"].values())
        assert "-site=lab" in diff and "+site=lab2" in diff, diff
        assert c.ssh(node, "cat /etc/gpuforge-site.conf") == "site=lab\n"  # check mode changed nothing


def test_a_failing_site_task_fails_its_node_only(lab_cluster: Any) -> None:
    c = lab_cluster
    spec = _site_spec(c, "site-fail.yaml", site_name="lab3", fail_on="node3")
    result = c.apply(spec)
    assert result["returncode"] == 1 and not result["ok"], result
    error = result["hosts"]["node3"]["error"] or ""
    assert error.startswith("ansible baseline: refuse this node:"), error
    assert "site policy refuses node3" in error
    assert result["hosts"]["node2"]["error"] is None and result["hosts"]["node1"]["error"] is None
    assert "ansible baseline: site marker file" in result["hosts"]["node2"]["changed"]
    assert c.ssh("node2", "cat /etc/gpuforge-site.conf") == "site=lab3\n"
    # Put the lab back as the other tests expect it.
    restored = c.apply(_site_spec(c, "site.yaml"))
    assert restored["returncode"] == 0 and restored["ok"], restored


SITE_IDS = {
    "site.test_site_checks__test_site_marker_file": "pass",
    "site.test_site_checks__test_site_sysctl_configured": "pass",
    "site.test_site_checks__test_site_requires_a_file_nobody_made": "fail",
    "site.test_site_checks__test_site_inventory_matches": "error",
}


def test_site_testinfra_checks_in_every_report(lab_cluster: Any, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    import jsonschema

    from gpuforge.validator.report import SCHEMA_PATH
    from tests.conftest import run_cli

    c = lab_cluster
    spec = _site_spec(c, "site.yaml")
    assert c.apply(spec)["ok"]
    with_checks = c.write(
        "site-checks.yaml",
        mutate=lambda d: d.update(
            site={**yaml_site(spec), "testinfra": [{"path": "site/checks", "targets": ["workers"]}]}
        ),
    )
    junit, prom = tmp_path / "v.xml", tmp_path / "v.prom"
    cp = run_cli("validate", str(with_checks), "--json", "--junit", str(junit), "--prom", str(prom), env=c.env)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    doc = json.loads(cp.stdout)
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text()))
    by_node = {n["name"]: {r["id"]: r for r in n["checks"] if r["layer"] == "site"} for n in doc["nodes"]}
    assert by_node["node1"] == {}  # not a target
    for node in ("node2", "node3"):
        assert {i: r["status"] for i, r in by_node[node].items()} == SITE_IDS
        failed = by_node[node]["site.test_site_checks__test_site_requires_a_file_nobody_made"]
        assert "/etc/site-required.conf is missing" in failed["message"]
        errored = by_node[node]["site.test_site_checks__test_site_inventory_matches"]
        assert "the site inventory service did not answer" in errored["message"]
    assert doc["summary"]["error"] == 2 and not doc["ok"]
    assert {(f["node"], f["id"]) for f in doc["failures"] if f["layer"] == "site"} == {
        (n, i) for n in ("node2", "node3") for i, s in SITE_IDS.items() if s in ("fail", "error")
    }
    # The built-in checks still ran and passed beside them.
    assert all(r["status"] in ("pass", "skip") for n in doc["nodes"] for r in n["checks"] if r["layer"] != "site")

    cases = {(case.get("classname"), case.get("name")): case for case in ET.parse(junit).getroot().iter("testcase")}
    for node in ("node2", "node3"):
        assert cases[(node, "site.test_site_checks__test_site_requires_a_file_nobody_made")].find("failure") is not None
        assert cases[(node, "site.test_site_checks__test_site_inventory_matches")].find("error") is not None
        marker = cases[(node, "site.test_site_checks__test_site_marker_file")]
        assert marker.find("failure") is None and marker.find("error") is None
    text = prom.read_text()
    assert 'gpuforge_checks{node="node2",status="error"} 1' in text
    assert 'check="site.test_site_checks__test_site_marker_file",layer="site"' in text

    only_site = run_cli("validate", str(with_checks), "--json", "--checks", "site", env=c.env)
    ids = {r["id"] for n in json.loads(only_site.stdout)["nodes"] for r in n["checks"]}
    assert ids == {"connection.ssh", *SITE_IDS}, ids


def yaml_site(spec: Path) -> dict[str, Any]:
    import yaml

    site: dict[str, Any] = yaml.safe_load(spec.read_text())["site"]
    return site

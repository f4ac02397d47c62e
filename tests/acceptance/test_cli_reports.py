"""``gpuforge accept`` end to end against the stub Slurm (in process, SSH replaced by the stub's shell):
the campaign document under the state dir, JUnit, Prometheus, the HTML page, --baseline, --plan."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuforge.acceptance import campaign as campaign_mod
from gpuforge.acceptance import tools
from gpuforge.acceptance.html import render_html
from gpuforge.cli import app
from tests.acceptance.stub_slurm import StubSlurm
from tests.acceptance.test_campaign import HEALTH_STUB, fast
from tests.conftest import run_cli


@pytest.fixture
def accept(stub: StubSlurm, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    stub.tool("gpuforge-health", HEALTH_STUB)
    monkeypatch.setattr(tools, "HEALTH_PROGRAM", str(stub.bin / "gpuforge-health"))
    monkeypatch.setattr(campaign_mod, "SshTransport", lambda *a, **k: stub)
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    for n in ("node1", "node2", "node3"):
        stub.set_node(n, partitions=["batch"])

    def run(*args: str) -> Any:
        return CliRunner().invoke(app, ["accept", *args, "--poll", "0.05"], catch_exceptions=False)

    return run


class Page(HTMLParser):
    """Element ids, svg classes, texts; fails on a tag closed out of order."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.classes: list[str] = []
        self.text: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.ids |= {a["id"]} if a.get("id") else set()
        self.classes += (a.get("class") or "").split()
        if tag not in ("meta", "line", "br"):
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.classes += (a.get("class") or "").split()

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack.pop() == tag, f"</{tag}> out of order"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_accept_writes_document_junit_prometheus_html_and_compares_with_a_baseline(
    accept: Callable[..., Any], stub: StubSlurm, spec_at: Callable, tmp_path: Path
) -> None:
    _spec, path = spec_at(fast())
    stub.env.update(STUB_RATES="node1=2100,node2=2150,node3=2120")
    first = accept(str(path), "--json")
    assert first.exit_code == 0, first.output
    doc1 = json.loads(first.stdout)
    saved1 = Path(doc1["saved"])
    assert saved1.parent.parent == tmp_path / "state" / "gflab" / "acceptance"
    assert saved1.parent.name.endswith("-" + doc1["spec_hash"]) and (saved1.parent / "report.html").exists()
    assert (saved1.parent / "raw" / "batch.out").read_text().count("GFACCEPT node") >= 3

    stub.env.update(STUB_RATES="node1=2100,node2=2150,node3=400", STUB_HEALTH_FAIL="node2")
    junit, prom, page = tmp_path / "a.xml", tmp_path / "a.prom", tmp_path / "a.html"
    second = accept(str(path), "--junit", str(junit), "--prom", str(prom), "--html", str(page), "--baseline", "latest")
    assert second.exit_code == 1, second.output
    assert "worse than the baseline: node2: pass -> fail" in second.stdout
    assert "node3: cpu.bogo_ops_per_s 2120 -> 400 (-81.1%)" in second.stdout
    assert "node3: outlier: cpu.bogo_ops_per_s = 400, median 2100" in second.stdout
    suites = ET.parse(junit).getroot()
    failures = [tc.get("name") for tc in suites.iter("testcase") if tc.find("failure") is not None]
    assert "accept.health" in failures and "accept.outlier.cpu.bogo_ops_per_s" in failures
    text = prom.read_text()
    assert 'gpuforge_accept_figure{node="node3",step="cpu",metric="bogo_ops_per_s"} 400.0' in text
    assert 'gpuforge_accept_outlier{node="node3",step="cpu",metric="bogo_ops_per_s"} 1' in text
    p = Page()
    p.feed(page.read_text())
    assert {"summary", "failed", "outliers", "regressions", "heatmap", "bars", "actions"} <= p.ids
    assert p.classes.count("bar") == 6 and "outlier" in p.classes and "median" in p.classes and "band" in p.classes
    words = " ".join(p.text)
    assert "node2: health fail: monitoring.node_exporter failed" in words and "node3: outlier: cpu" in words


def test_html_escapes_what_nodes_print(spec_at: Callable) -> None:
    doc = {"id": "x", "cluster": "c<1>", "spec": "s", "spec_hash": "h", "started_at": "t", "duration_s": 1,
           "summary": {"pass": 0, "fail": 1, "error": 0, "outlier": 0, "untested": 0}, "groups": [],
           "nodes": [{"node": "n1", "group": "g", "status": "fail", "untested": None, "outliers": [],
                      "steps": [{"step": "cpu", "status": "fail", "message": "<script>alert(1)</script>",
                                 "metrics": {}, "duration_s": 1}]}],
           "stats": [], "actions": [], "problems": []}  # fmt: skip
    page = render_html(doc)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "default-src 'none'" in page and "c&lt;1&gt;" in page


def test_plan_prints_the_scripts_and_touches_nothing(tmp_path: Path) -> None:
    from tests.acceptance.conftest import lab_spec

    path = lab_spec(tmp_path, lambda d: d.update(acceptance={"group_by": "leaf_switch"}))
    cp = run_cli("accept", str(path), "--plan", "--limit", "node[2-3]")
    assert cp.returncode == 0, cp.stderr
    assert "#SBATCH --nodelist=node[2-3]" in cp.stdout and "#SBATCH --job-name=gpuforge-accept-leaf1" in cp.stdout
    assert "srun -N2 -n2 --distribution=arbitrary --label --kill-on-bad-exit=0 python3 -c" in cp.stdout


def test_kubernetes_is_planned_as_pinned_jobs(tmp_path: Path) -> None:
    from tests.conftest import REPO

    k8s = REPO / "inventories" / "k8s-gpu-operator.yaml"
    if not k8s.exists():
        pytest.skip("no Kubernetes example inventory")
    cp = run_cli("accept", str(k8s), "--plan")
    assert cp.returncode == 0, cp.stderr
    jobs = [json.loads(part) for part in cp.stdout.split("\n---\n")]
    assert jobs and all(j["kind"] == "Job" and j["spec"]["template"]["spec"]["nodeName"] for j in jobs)
    assert all(j["spec"]["backoffLimit"] == 0 and j["spec"]["ttlSecondsAfterFinished"] == 3600 for j in jobs)
    config = json.loads(base64.b64decode(jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"]))
    assert [s["name"] for s in config["steps"]][:2] == ["cpu", "memory"], "no health step in a Job (Slurm's program)"


def test_plan_names_a_leaf_only_when_jobs_are_grouped_by_leaf(tmp_path: Path) -> None:
    """By partition (the default) a job has no leaf: its header says none (it said ``leaf None``)."""
    from tests.acceptance.conftest import lab_spec

    by_partition = run_cli("accept", str(lab_spec(tmp_path)), "--plan")
    assert by_partition.returncode == 0, by_partition.stderr
    headers = [line for line in by_partition.stdout.splitlines() if line.startswith("# ---- job ")]
    assert headers and "None" not in by_partition.stdout
    assert all(", leaf " not in h and ", partition " in h for h in headers), headers
    by_leaf = lab_spec(tmp_path, lambda d: d.update(acceptance={"group_by": "leaf_switch"}), name="leaf.yaml")
    cp = run_cli("accept", str(by_leaf), "--plan")
    assert "# ---- job leaf1: " in cp.stdout and ", leaf leaf1\n" in cp.stdout, cp.stdout

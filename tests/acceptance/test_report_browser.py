"""The HTML report of a campaign judged from recorded real outputs (tests/acceptance/fixtures: stress-ng,
fio, gpuforge-health), opened in the distro's headless Chromium (gpuforge.acceptance.browser): the
page loads, the heat map and every bar chart are laid out, the failed and outlier nodes are named.

Skipped only where no Chromium is installed (scripts/setup.sh installs it); under CI (``CI`` set)
a missing browser is a failure, so CI never passes by skipping."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.acceptance import browser, outliers
from gpuforge.acceptance.campaign import figures, judge_record
from gpuforge.acceptance.html import render_html
from gpuforge.acceptance.results import Campaign, NodeResult
from gpuforge.spec import Spec
from tests.acceptance.conftest import record_of

#: node -> (recorded output, step) of each step it ran.
RECORDED = {
    "node1": [("stress_cpu1_a.json", "cpu"), ("stress_vm_pass.json", "memory"), ("fio_randrw_pass.json", "disk")],
    "node2": [("health_fail.json", "health"), ("stress_cpu1_b.json", "cpu"), ("stress_vm_pass.json", "memory")],
    "node3": [("stress_cpu1_slow.json", "cpu"), ("stress_vm_pass.json", "memory")],
    "node4": [("stress_cpu1_b.json", "cpu"), ("stress_vm_pass.json", "memory")],
}


def need_browser() -> str:
    """The Chromium binary; a skip with the reason where there is none (a failure under CI)."""
    found = browser.find_browser()
    if found is None:
        why = f"no Chromium here ({', '.join(browser.BINARIES)}): scripts/setup.sh installs {browser.PACKAGE}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must check the report in a real browser: {why}", pytrace=False)
        pytest.skip(why)
    return found


def recorded_campaign(spec: Spec) -> dict[str, Any]:
    """A campaign document judged from the recorded outputs, with its peer statistics and outliers."""
    camp = Campaign("20261126T080000.000Z-recorded", "gflab", "spec.yaml", "recorded", 1795680000.0, 42.0)
    for node, steps in RECORDED.items():
        results = [judge_record(spec, record_of(name, step)) for name, step in steps]
        camp.nodes.append(NodeResult(node, "batch", results))
    camp.stats, found = outliers.compare(figures(camp.nodes), spec.acceptance.outliers)
    for o in found:
        camp.node(o.node).outliers.append(o)  # type: ignore[union-attr]
    camp.actions.append({"action": "drain", "node": "node2", "reason": "gpuforge: accept: health", "result": "drained"})
    return camp.to_dict()


def test_recorded_report_in_headless_chromium(spec_at: Callable, tmp_path: Path) -> None:
    spec, _ = spec_at()
    doc = recorded_campaign(spec)
    assert {n["node"]: n["status"] for n in doc["nodes"]} == {
        "node1": "pass", "node2": "fail", "node3": "outlier", "node4": "pass"}  # fmt: skip
    page = tmp_path / "report.html"
    page.write_text(render_html(doc))
    binary = need_browser()
    v = browser.view(page, binary)
    assert browser.problems(v, failed=["node2"], outliers=["node3"]) == []
    heat = v.layout["heatmap"]
    assert heat["cells"] == 4 * 4 and heat["classes"] == {"pass": 8, "fail": 1, "outlier": 1, "-": 6}, heat
    cpu = next(c for c in v.layout["bars"] if c["metric"] == "batch/cpu.bogo_ops_per_s")
    assert cpu["bars"] == 4 and [t.split(":")[0] for t in cpu["outliers"]] == ["node3"], cpu
    assert "monitoring.node_exporter" in v.layout["failed"]["text"].split("node2: health fail: ", 1)[1]


def test_a_broken_report_is_caught(spec_at: Callable, tmp_path: Path) -> None:
    """The check fails a page whose plots are missing or that names the wrong nodes."""
    spec, _ = spec_at()
    doc = recorded_campaign(spec)
    page = tmp_path / "report.html"
    page.write_text(render_html(doc).replace('<svg id="heatmap"', '<svg id="heatmap" style="display:none"'))
    v = browser.view(page, need_browser())
    found = browser.problems(v, failed=["node3"], outliers=["node1"])
    assert any(p.startswith("the heat map is not drawn") for p in found), found
    assert any(p.startswith("node3 is not named in the failed list") for p in found), found
    assert any(p.startswith("node1 has no flagged bar") for p in found), found


def test_a_zero_figure_is_a_drawn_bar_of_no_height_and_a_hidden_bar_is_not(spec_at: Callable, tmp_path: Path) -> None:
    """A node that measured 0 (the lab's CPU-starved node3 once counted 0 memory bogo ops) has a bar of
    height 0: drawn. A bar squashed by the page is not."""
    spec, _ = spec_at()
    doc = recorded_campaign(spec)
    mem = next(x for x in doc["nodes"] if x["node"] == "node4")
    step = next(r for r in mem["steps"] if r["step"] == "memory")
    step["metrics"] = {k: 0 for k in step["metrics"]}
    page = tmp_path / "report.html"
    html = render_html(doc)
    assert "<title>node4: 0</title>" in html
    page.write_text(html)
    binary = need_browser()
    assert browser.problems(browser.view(page, binary), failed=["node2"], outliers=["node3"]) == []
    squash = re.compile(r'(<rect class="bar"[^>]*height=")[0-9.]+("[^>]*><title>node1: )')
    assert squash.search(html)
    page.write_text(squash.sub(r"\g<1>0\g<2>", html, count=1))
    squashed = browser.problems(browser.view(page, binary), failed=["node2"], outliers=["node3"])
    assert any("not fully drawn" in p for p in squashed), squashed


def test_a_tiny_figure_against_a_large_one_is_still_a_drawn_bar(spec_at: Callable, tmp_path: Path) -> None:
    """Found by a fresh-clone CI run: the CPU-starved lab node3 counted 3.22 memory bogo ops against
    node1's 28111.9, and its bar was 0.0 px tall: not drawn for a reader. A figure above 0 has a bar."""
    spec, _ = spec_at()
    doc = recorded_campaign(spec)
    for name, figure in (("node1", 28111.9), ("node4", 3.22)):
        node = next(x for x in doc["nodes"] if x["node"] == name)
        step = next(r for r in node["steps"] if r["step"] == "memory")
        step["metrics"] = {k: figure for k in step["metrics"]}
    html = render_html(doc)
    tiny = re.search(r'height="([0-9.]+)" fill="[^"]*"><title>node4: 3.22</title>', html)
    assert tiny and float(tiny[1]) >= 1.0, tiny
    page = tmp_path / "report.html"
    page.write_text(html)
    assert browser.problems(browser.view(page, need_browser()), failed=["node2"], outliers=["node3"]) == []


def test_no_sandbox_only_as_root(tmp_path: Path) -> None:
    as_root = browser.browser_argv("chromium", "file:///r.html", tmp_path, root=True)
    as_user = browser.browser_argv("chromium", "file:///r.html", tmp_path, root=False)
    assert "--no-sandbox" in as_root and "--no-sandbox" not in as_user
    assert as_root[-2:] == ["--dump-dom", "file:///r.html"] and f"--user-data-dir={tmp_path}" in as_user

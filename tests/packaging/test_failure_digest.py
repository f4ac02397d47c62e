"""The lab failures' digest (scripts/failure_digest.py), run as test.sh runs it: a real process
reading real JUnit files, what it prints checked line by line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "failure_digest.py"

FOREGROUND = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.monitoring.test_monitoring_lab" name="test_monitoring_in_the_lab" time="137">
<failure message="AssertionError: timed out after 120s waiting for gpuforge_slurm_node_state of 3 nodes">long
traceback</failure>
<system-out>----------- Captured Out -----------
first line
node2 down* Not responding&#155;31m
</system-out>
</testcase>
<testcase classname="tests.lab.test_lab_nodes" name="test_three_nodes_come_up" time="3"/>
<testcase classname="tests.slurm.test_ha_lab.TestTakeover" name="test_jobs_kept" time="9">
<error>setup failed
RuntimeError: the lab would not start</error>
</testcase>
</testsuite></testsuites>
"""


def digest(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, files)], capture_output=True, text=True, timeout=30)


def test_each_failure_with_its_message_and_what_it_printed(tmp_path: Path) -> None:
    (tmp_path / "lab.xml").write_text(FOREGROUND)
    got = digest(tmp_path / "lab.xml", tmp_path / "missing.xml")
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [
        "== failures (2), repeated here from the logs above",
        "FAILURE tests/monitoring/test_monitoring_lab.py::test_monitoring_in_the_lab",
        "  AssertionError: timed out after 120s waiting for gpuforge_slurm_node_state of 3 nodes",
        "  the test printed (last 2 of 2 lines):",  # pytest's section line left out
        "    first line",
        "    node2 down* Not responding31m",  # a C1 control (CSI) stripped
        "ERROR tests/slurm/test_ha_lab.py::TestTakeover::test_jobs_kept",
        "  RuntimeError: the lab would not start",
    ]


def test_long_output_is_bounded(tmp_path: Path) -> None:
    lines = "\n".join(f"line {i} " + "x" * 1000 for i in range(100))
    junit = FOREGROUND.replace("first line", lines).replace("long\ntraceback", "t")
    (tmp_path / "lab.xml").write_text(junit)
    out = digest(tmp_path / "lab.xml").stdout.splitlines()
    assert "  the test printed (last 40 of 101 lines):" in out
    printed = [line for line in out if line.startswith("    line ")]
    assert printed[0].startswith("    line 61 ") and len(printed) == 39
    assert max(len(line) for line in out) <= 4 + 300


def test_no_failure_prints_nothing(tmp_path: Path) -> None:
    passed = '<testcase classname="tests.x.test_a" name="t"/>'
    (tmp_path / "ok.xml").write_text(f"<testsuites><testsuite>{passed}</testsuite></testsuites>")
    got = digest(tmp_path / "ok.xml")
    assert (got.returncode, got.stdout) == (0, "")

"""The test command's phase times (scripts/test_times.py), run as test.sh runs it: a real
process, a real JUnit file, a record kept between two runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "test_times.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="tests.lab.test_vm" name="test_boot" time="700.5"/>
<testcase classname="tests.lab.test_vm.TestPair" name="test_pair" time="60.0"/>
<testcase classname="tests.converge.test_faults_lab" name="test_kill" time="12.25"/>
</testsuite></testsuites>
"""


def run(tmp_path: Path, marks: list[str], junit: str = JUNIT) -> subprocess.CompletedProcess[str]:
    (tmp_path / "lab.xml").write_text(junit)
    args = [sys.executable, str(SCRIPT), "--record", str(tmp_path / "state" / "times.json")]
    args += ["--lab-junit", str(tmp_path / "lab.xml"), "--", *marks]
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def test_prints_phases_and_lab_files_and_keeps_a_record(tmp_path: Path) -> None:
    got = run(tmp_path, ["setup=100", "ruff=160", "mypy=170", "not-lab=230", "lab=1000", "end=2000"])
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert "  setup          60" in lines
    assert "  not-lab       770" in lines
    assert "  lab          1000" in lines
    assert "  total        1900  (31.7 min)" in lines
    # Per file, slowest first; a test class's cases count for its module.
    assert lines.index("     760  tests/lab/test_vm.py") < lines.index("      12  tests/converge/test_faults_lab.py")
    assert "test times: no record of an earlier run to compare with" in lines
    record = json.loads((tmp_path / "state" / "times.json").read_text())
    assert record["phases"]["lab"] == 1000
    assert record["lab_files"]["tests/lab/test_vm.py"] == 760.5


def test_names_a_regression_of_more_than_the_bound_and_still_exits_0(tmp_path: Path) -> None:
    run(tmp_path, ["setup=0", "lab=100", "end=1100"])
    slower = JUNIT.replace('time="700.5"', 'time="900"')
    got = run(tmp_path, ["setup=0", "lab=100", "end=1250"], junit=slower)
    assert got.returncode == 0
    assert "test times: SLOWER than the previous run by more than 120 s:" in got.stdout
    assert "  phase lab: 1150 s, was 1000 s" in got.stdout
    assert "  lab file tests/lab/test_vm.py: 960 s, was 760 s" in got.stdout
    # A phase within the bound is not named.
    assert "phase setup" not in got.stdout


def test_an_unreadable_record_or_junit_is_no_crash(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "times.json").write_text("{not json")
    got = run(tmp_path, ["setup=0", "end=5"], junit="<broken")
    assert got.returncode == 0, got.stderr
    assert "test times: no record of an earlier run to compare with" in got.stdout
    assert "lab time per test file" not in got.stdout


def test_a_malformed_mark_is_refused(tmp_path: Path) -> None:
    for bad in ("setup=soon", "setup=5:1", "=5", "setup=5:1:x"):
        got = run(tmp_path, [bad, "end=5"])
        assert got.returncode == 2, bad
        assert f"{bad!r} is not name=epoch or name=epoch:busy:total" in got.stderr


def test_each_phase_says_how_busy_the_cpus_were_when_the_ticks_are_given(tmp_path: Path) -> None:
    """busy/total CPU ticks at each mark (as test.sh reads /proc/stat): the phase's share of busy time."""
    marks = ["setup=0:100:1000", "not-lab=60:1000:2000", "lab=660:2500:4000", "end=1000"]
    got = run(tmp_path, marks)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0] == "== test times (s)  and how busy the CPUs were"
    assert "  setup          60  cpu  90%" in lines
    assert "  not-lab       600  cpu  75%" in lines
    assert "  lab           340" in lines  # the end mark carries no ticks: no share for the last phase


def test_the_two_lab_runs_junit_files_add_up_per_file(tmp_path: Path) -> None:
    """test.sh's two lab runs side by side: a file's tests may be in both, its time is their sum."""
    session, own = tmp_path / "session.xml", tmp_path / "own.xml"
    session.write_text(JUNIT.replace('<testcase classname="tests.lab.test_vm"', '<x classname="x"'))
    case = '<testcase classname="tests.lab.test_vm" time="30"/>'
    own.write_text(f"<testsuites><testsuite>{case}</testsuite></testsuites>")
    args = [sys.executable, str(SCRIPT), "--record", str(tmp_path / "t.json"), "--lab-junit", str(session), str(own)]
    got = subprocess.run([*args, "--", "lab=0", "end=100"], capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got.stderr
    record = json.loads((tmp_path / "t.json").read_text())
    assert record["lab_files"] == {"tests/lab/test_vm.py": 90.0, "tests/converge/test_faults_lab.py": 12.25}


def test_the_runs_side_by_side_are_printed_kept_and_compared(tmp_path: Path) -> None:
    """test.sh's lab phase: two pytest runs at once, each one's own seconds beside the phase's."""
    marks = ["setup=0", "ruff=90", "mypy=91", "not-lab=100", "lab=700", "end=1900"]

    def times(*runs: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / "lab.xml").write_text(JUNIT)
        args = [sys.executable, str(SCRIPT), "--record", str(tmp_path / "times.json"), "--lab-junit"]
        args += [str(tmp_path / "lab.xml"), "--runs", *runs, "--", *marks]
        return subprocess.run(args, capture_output=True, text=True, timeout=30)

    first = times("lab=1200", "lab-beside=1150")
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert "  lab          1200" in lines and "  total        1900  (31.7 min)" in lines
    at = lines.index("== the runs side by side in the lab phase (s)")
    assert lines[at + 1 : at + 3] == ["  lab          1200", "  lab-beside   1150"]
    assert json.loads((tmp_path / "times.json").read_text())["runs"]["lab-beside"] == 1150
    second = times("lab=1200", "lab-beside=1400")
    assert "  run lab-beside: 1400 s, was 1150 s" in second.stdout
    assert times("lab=soon").returncode == 2

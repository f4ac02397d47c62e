"""The test command's phase times: printed at the end of a run, kept for the next run to compare.

``scripts/test.sh`` passes the start of each phase (``name=epoch:busy:total``, in order, then ``end=...``;
busy and total are the machine's CPU clock ticks from ``/proc/stat``, so each phase's CPU load is printed too)
and the lab runs' JUnit XML files (two runs side by side). This prints each phase's seconds and
the lab's seconds per test file, names every phase or lab file that took more than ``REGRESSION_S`` longer than in the
record of the previous run, and writes this run's figures as the new record. It never changes the
run's exit status: a slower run is named, not failed (a busy machine is slower, not broken).

Standard library only: it runs before and after anything else the suite needs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

#: A phase or lab file this many seconds slower than in the previous record is named as a regression.
REGRESSION_S = 120
RECORD_VERSION = 1


@dataclass(frozen=True)
class Mark:
    """A phase's start: its name, the epoch second, and the CPU clock ticks so far (busy, all; None: not given)."""

    name: str
    epoch: int
    cpu: tuple[int, int] | None = None


def parse_mark(text: str) -> Mark | None:
    """``name=epoch`` or ``name=epoch:busy:total`` (``/proc/stat`` ticks) -> a :class:`Mark`; None if malformed."""
    name, _, value = text.partition("=")
    fields = value.split(":")
    if not name or not all(f.isdigit() for f in fields) or len(fields) not in (1, 3):
        return None
    cpu = (int(fields[1]), int(fields[2])) if len(fields) == 3 else None
    return Mark(name, int(fields[0]), cpu)


def phase_seconds(marks: list[Mark]) -> dict[str, int]:
    """``[setup@t0, ruff@t1, ..., end@tn]`` -> seconds of each phase (the last mark ends them)."""
    return {a.name: max(0, b.epoch - a.epoch) for a, b in itertools.pairwise(marks)}


def phase_cpu_busy(marks: list[Mark]) -> dict[str, float]:
    """Each phase's share of CPU time the machine spent busy (0..1), where both of its marks carry ticks."""
    out: dict[str, float] = {}
    for a, b in itertools.pairwise(marks):
        if a.cpu and b.cpu and b.cpu[1] > a.cpu[1]:
            out[a.name] = max(0.0, min(1.0, (b.cpu[0] - a.cpu[0]) / (b.cpu[1] - a.cpu[1])))
    return out


def lab_file_seconds(junit_xml: Path) -> dict[str, float]:
    """Seconds per test file in a pytest JUnit XML (classname ``tests.lab.test_x.TestY``: ``tests/lab/test_x.py``)."""
    try:
        root = ET.parse(junit_xml).getroot()
    except (OSError, ET.ParseError):
        return {}
    totals: dict[str, float] = defaultdict(float)
    for case in root.iter("testcase"):
        module = _module_of(case.get("classname") or "")
        try:
            totals[module] += float(case.get("time") or 0)
        except ValueError:
            continue
    return dict(totals)


def lab_files_seconds(junits: list[Path]) -> dict[str, float]:
    """:func:`lab_file_seconds` of several runs added up (a file's tests may be split between them)."""
    totals: dict[str, float] = defaultdict(float)
    for junit in junits:
        for module, seconds in lab_file_seconds(junit).items():
            totals[module] += seconds
    return dict(totals)


def _module_of(classname: str) -> str:
    parts = classname.split(".")
    # Drop test classes (capitalised) after the module: tests.lab.test_x.TestY -> tests/lab/test_x.py
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return "/".join(parts) + ".py" if parts and parts[0] else "(unknown)"


def regressions(now: dict[str, dict[str, float]], before: dict[str, dict[str, float]]) -> list[str]:
    """Lines naming each phase or lab file more than ``REGRESSION_S`` slower than in ``before``."""
    lines = []
    for section in ("phases", "runs", "lab_files"):
        old = before.get(section, {})
        for name, seconds in now.get(section, {}).items():
            if name in old and seconds - old[name] > REGRESSION_S:
                lines.append(f"{section[:-1].replace('_', ' ')} {name}: {seconds:.0f} s, was {old[name]:.0f} s")
    return lines


def report(
    now: dict[str, dict[str, float]], before: dict[str, dict[str, float]] | None, busy: dict[str, float] | None = None
) -> str:
    """The table printed at the end of the run (``busy``: each phase's CPU busy share, where known)."""
    phases, busy = now["phases"], busy or {}
    total = sum(phases.values())
    out = ["== test times (s)" + ("  and how busy the CPUs were" if busy else "")]
    out += [
        f"  {name:<10} {seconds:>6.0f}" + (f"  cpu {busy[name]:4.0%}" if name in busy else "")
        for name, seconds in phases.items()
    ]
    out.append(f"  {'total':<10} {total:>6.0f}  ({total / 60:.1f} min)")
    if now.get("runs"):
        out.append("== the runs side by side in the lab phase (s)")
        out += [f"  {name:<10} {seconds:>6.0f}" for name, seconds in now["runs"].items()]
    files = sorted(now["lab_files"].items(), key=lambda kv: -kv[1])
    if files:
        out.append("== lab time per test file (s)")
        out += [f"  {seconds:>6.0f}  {name}" for name, seconds in files]
    if before is None:
        out.append("test times: no record of an earlier run to compare with")
    else:
        slower = regressions(now, before)
        if slower:
            out.append(f"test times: SLOWER than the previous run by more than {REGRESSION_S} s:")
            out += [f"  {line}" for line in slower]
        else:
            out.append(f"test times: no phase or lab file more than {REGRESSION_S} s slower than the previous run")
    return "\n".join(out)


def read_record(path: Path) -> dict[str, dict[str, float]] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
        return None
    return {k: dict(data.get(k) or {}) for k in ("phases", "runs", "lab_files")}


def write_record(path: Path, now: dict[str, dict[str, float]]) -> None:
    """Replace the record atomically (a temporary file in its directory, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".test-times-")
    with os.fdopen(fd, "w") as out:
        json.dump({"version": RECORD_VERSION, **now}, out, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, required=True, help="the previous run's record; replaced by this run's")
    ap.add_argument("--lab-junit", type=Path, nargs="*", default=[], help="the lab runs' JUnit XML files")
    ap.add_argument("--runs", nargs="*", default=[], help="name=seconds of each run side by side in a phase")
    ap.add_argument("marks", nargs="+", help="phase=epoch[:busy:total] in order, the last one 'end=...'")
    args = ap.parse_args(argv)
    marks = []
    for text in args.marks:
        mark = parse_mark(text)
        if mark is None:
            print(f"test_times: {text!r} is not name=epoch or name=epoch:busy:total", file=sys.stderr)
            return 2
        marks.append(mark)
    runs = {}
    for text in args.runs:
        name, _, seconds = text.partition("=")
        if not name or not seconds.isdigit():
            print(f"test_times: {text!r} is not name=seconds", file=sys.stderr)
            return 2
        runs[name] = float(seconds)
    now: dict[str, dict[str, float]] = {
        "phases": {k: float(v) for k, v in phase_seconds(marks).items()},
        "runs": runs,
        "lab_files": lab_files_seconds(args.lab_junit),
    }
    print(report(now, read_record(args.record), phase_cpu_busy(marks)))
    try:
        write_record(args.record, now)
    except OSError as exc:
        print(f"test_times: could not keep this run's record ({exc})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

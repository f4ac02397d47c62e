"""The test runs' failures, printed last: what a reader of only the end of a long log needs.

``scripts/test.sh`` runs the tests in three pytest runs side by side and prints one run's log
after the other's, so a failure's traceback can sit thousands of lines above the end. This prints,
for every failed or errored test case in the JUnit XML files given, its id, the failure's message
and the last lines of what the test printed (``junit_logging=system-out``). Every text is bounded
and stripped of control characters (a test's output can carry what a node wrote). It never changes
the run's exit status.

Standard library only: it runs before and after anything else the suite needs.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MESSAGE_CHARS = 1500
OUTPUT_LINES = 40
LINE_CHARS = 300
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BANNER = re.compile(r"^-+ Captured .* -+$")  # pytest's section line in system-out


@dataclass(frozen=True)
class Failure:
    test_id: str
    kind: str  # "failure" or "error"
    message: str
    output: str


def clean(text: str) -> str:
    """``text`` without control characters other than newline and tab."""
    return _CONTROL.sub("", text)


def test_id(case: ET.Element) -> str:
    """``tests.lab.test_x`` + ``test_y`` -> ``tests/lab/test_x.py::test_y`` (a class kept as ``::Class``)."""
    classname, name = case.get("classname", ""), case.get("name", "?")
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        if parts[i - 1].startswith("test_"):
            path = "/".join(parts[:i]) + ".py"
            return "::".join([path, *parts[i:], name])
    return f"{classname}::{name}"


def failures(junit_xml: Path) -> Iterator[Failure]:
    """Every failed or errored test case in one JUnit XML file (none for a file that is missing or unparsable)."""
    try:
        root = ET.parse(junit_xml).getroot()
    except (OSError, ET.ParseError):
        return
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            bad = case.find(kind)
            if bad is None:
                continue
            out = case.find("system-out")
            traceback = (bad.text or "").strip().splitlines()
            message = bad.get("message") or (traceback[-1] if traceback else "")
            yield Failure(test_id(case), kind, message, (out.text or "") if out is not None else "")


def render(failure: Failure) -> str:
    """One failure as a few bounded lines."""
    message = clean(failure.message)
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + " [...]"
    lines = [f"{failure.kind.upper()} {clean(failure.test_id)}", *(f"  {line}" for line in message.splitlines())]
    printed = [
        clean(line)[:LINE_CHARS] for line in failure.output.splitlines() if line.strip() and not _BANNER.match(line)
    ]
    if printed:
        lines.append(f"  the test printed (last {min(len(printed), OUTPUT_LINES)} of {len(printed)} lines):")
        lines.extend(f"    {line}" for line in printed[-OUTPUT_LINES:])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", nargs="*", type=Path, help="JUnit XML files of the test runs")
    args = ap.parse_args(argv)
    found = [f for path in args.junit for f in failures(path)]
    if found:
        print(f"== failures ({len(found)}), repeated here from the logs above")
        for failure in found:
            print(render(failure))
    return 0


if __name__ == "__main__":
    sys.exit(main())

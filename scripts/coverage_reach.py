"""Which test folders' test calls reach lines of the measured packages that no other folder reaches.

Reads a coverage data file written with per-test contexts, from the repository's root:

    GPUFORGE_TRACE_ALL=1 COVERAGE_FILE=/tmp/reach/.coverage .venv/bin/python -m pytest -m "not lab" \\
        -n 3 --dist loadscope --cov=gpuforge/deploy --cov=gpuforge/orchestrate --cov-report= --cov-context=test
    .venv/bin/python scripts/coverage_reach.py /tmp/reach/.coverage

(``GPUFORGE_TRACE_ALL=1``: every test call traced, the ``not_measured`` ones too, so that their reach shows.)
It prints, per folder of ``tests/``, the lines its test calls cover and how many of them only its calls
cover, then the lines that would go unmeasured if the folders in ``NOT_MEASURED`` (tests/conftest.py) ran
untraced: a line covered by a setup, a teardown or a measured folder's call stays measured. Nothing
must be listed there for ``NOT_MEASURED`` to be right.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import coverage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import NOT_MEASURED


def folder_and_phase(context: str) -> tuple[str, str]:
    """``tests/spec/test_x.py::test_y|run`` -> ("spec", "run"); a line run outside any test -> ("", "")."""
    if not context:
        return "", ""
    test, _, phase = context.rpartition("|")
    parts = test.split("::")[0].split("/")
    return (parts[1] if parts[0] == "tests" and len(parts) > 2 else parts[0]), phase


def main(data_file: str) -> int:
    data = coverage.CoverageData(basename=data_file)
    data.read()
    calls: dict[str, set[tuple[str, int]]] = defaultdict(set)
    unmeasured_only: list[tuple[str, int]] = []
    for path in sorted(data.measured_files()):
        for line, contexts in sorted((data.contexts_by_lineno(path) or {}).items()):
            kept = False
            for folder, phase in map(folder_and_phase, contexts):
                if phase == "run":
                    calls[folder].add((path, line))
                kept = kept or phase != "run" or folder not in NOT_MEASURED
            if not kept:
                unmeasured_only.append((path, line))
    for folder in sorted(calls):
        others = set().union(*(lines for name, lines in calls.items() if name != folder))
        print(f"{folder:20} {len(calls[folder]):6} lines, {len(calls[folder] - others):5} only from its calls")
    print(f"lines only the NOT_MEASURED folders' calls cover: {len(unmeasured_only)}")
    for path, line in unmeasured_only:
        print(f"  {path}:{line}")
    return 1 if unmeasured_only else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".coverage"))

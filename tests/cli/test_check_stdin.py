"""``gpuforge check -`` reads the spec from standard input; its errors and lines name ``<stdin>``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.spec import SpecError
from gpuforge.spec.limits import FILE_BYTES
from gpuforge.spec.load import parse_spec_stream
from tests.conftest import REPO

SPEC = REPO / "inventories" / "lab-slurm-minimal.yaml"


def check_stdin(text: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", "check", "-", *args],
        input=text, capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip


def test_a_good_spec_on_stdin_is_ok() -> None:
    cp = check_stdin(SPEC.read_text())
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "<stdin>: OK (slurm cluster 'gflab', 3 nodes)\n"


def test_errors_name_stdin_and_their_lines() -> None:
    cp = check_stdin("cluster: {name: x, scheduler: slurm}\nnode_groups: 3\n")
    assert cp.returncode == 2
    assert "<stdin>: 1 problem(s)" in cp.stderr
    assert "<stdin>:2: node_groups: Input should be a valid list (got 3)" in cp.stderr
    assert "No such file" not in cp.stderr and "Traceback" not in cp.stderr


def test_json_errors_from_stdin() -> None:
    cp = check_stdin("a: [\n", "--json")
    assert cp.returncode == 2
    doc = json.loads(cp.stdout)
    assert doc["ok"] is False and doc["errors"][0]["message"].startswith("not valid YAML")


def test_stdin_is_bounded_by_the_file_limit(tmp_path: Path) -> None:
    big = io.BytesIO(b"#" * (FILE_BYTES.value + 10))
    with pytest.raises(SpecError) as got:
        parse_spec_stream(big, tmp_path)
    assert got.value.filename == "<stdin>" and "refused: more than" in got.value.format()
    assert big.tell() == FILE_BYTES.value + 1  # read no further than the limit shows


def test_bytes_that_are_not_utf8_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as got:
        parse_spec_stream(io.BytesIO(b"\xff\xfe"), tmp_path)
    assert "<stdin>: (top level): not UTF-8 text (byte 0" in got.value.format()

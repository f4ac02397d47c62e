"""``gpuforge render`` and ``schema -o``: unwritable outputs and oversized renders are exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuforge import cli

REPO = Path(__file__).resolve().parents[2]
H100 = str(REPO / "inventories" / "slurm-h100.yaml")


def gpuforge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", *args], capture_output=True, text=True, cwd=REPO, timeout=300
    )


@pytest.mark.parametrize("target", ["a-regular-file", "/proc/gpuforge-nope"])
def test_render_into_an_unwritable_place_is_exit_2(tmp_path: Path, target: str) -> None:
    (tmp_path / "a-regular-file").write_text("x")
    out = target if target.startswith("/") else str(tmp_path / target)
    cp = gpuforge("render", H100, "-o", out)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stderr.startswith(f"cannot write under {out}: "), cp.stderr


def test_schema_into_an_unwritable_place_is_exit_2() -> None:
    cp = gpuforge("schema", "-o", "/proc/gpuforge-nope/schema.json")
    assert cp.returncode == 2 and "Traceback" not in cp.stderr
    assert cp.stderr.startswith("cannot write /proc/gpuforge-nope/schema.json: No such file or directory"), cp.stderr


def test_render_limit_writes_only_the_selected_nodes(tmp_path: Path) -> None:
    cp = gpuforge("render", H100, "-o", str(tmp_path), "--limit", "gpu[001-002]")
    assert cp.returncode == 0, cp.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu001", "gpu002"]
    bad = gpuforge("render", H100, "-o", str(tmp_path), "--limit", "-oProxyCommand")
    assert bad.returncode == 2 and bad.stderr.startswith("--limit: "), bad.stderr


def test_an_oversized_render_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "MAX_RENDER_BYTES", 10_000)
    result = CliRunner().invoke(cli.app, ["render", H100, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "render some nodes with --limit" in result.output
    assert not (tmp_path / "out").exists()

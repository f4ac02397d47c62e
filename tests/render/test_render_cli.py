"""``gpuforge render`` and ``schema -o``: unwritable outputs and oversized renders are exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge import cli, cli_spec
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
H100 = str(REPO / "inventories" / "slurm-h100.yaml")
EVERY_FIELD = REPO / "tests" / "spec" / "fixtures" / "every_field_slurm.yaml"


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
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["gpu001", "gpu002"]
    bad = gpuforge("render", H100, "-o", str(tmp_path), "--limit", "-oProxyCommand")
    assert (
        bad.returncode == 2
        and "  --limit: '-oProxyCommand' in hostlist '-oProxyCommand' is not a host name" in bad.stderr
    )


def test_an_oversized_render_is_refused_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_spec, "MAX_RENDER_BYTES", 10_000)
    result = CliRunner().invoke(cli.app, ["render", H100, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "render some nodes with --limit" in result.output
    assert not (tmp_path / "out").exists()


def _render(spec: Path, out: Path, *extra: str) -> None:
    result = CliRunner().invoke(cli.app, ["render", str(spec), "-o", str(out), *extra])
    assert result.exit_code == 0, result.output


def test_a_second_render_leaves_nothing_of_the_first(tmp_path: Path) -> None:
    """A file the spec no longer renders is gone, a node the spec dropped goes on a full render, a
    --limit render keeps the other nodes, and what gpuforge did not write stays."""
    data = yaml.safe_load(EVERY_FIELD.read_text())
    data.pop("site")  # its roles and playbooks live beside the fixture
    spec, out = tmp_path / "spec.yaml", tmp_path / "out"
    spec.write_text(yaml_text.dump(data))
    _render(spec, out)
    units = sorted(p.name for p in (out / "gpu1" / "etc" / "systemd" / "system").glob("*.mount"))
    assert units == ["home.mount", "sw.mount"]
    (out / "notes.txt").write_text("mine")
    data["storage"]["mounts"] = [m for m in data["storage"]["mounts"] if m["name"] != "sw"]
    group = next(g for g in data["node_groups"] if g["hosts"] == "gpu[1-2]")
    group.update(hosts="gpu1", addresses=group["addresses"][:1], leaf_switch="leaf1")  # gpu2 leaves the spec
    spec.write_text(yaml_text.dump(data))
    _render(spec, out, "--limit", "gpu1")
    assert (out / "gpu2").is_dir()  # a --limit render leaves the other nodes alone
    left = sorted(p.name for p in (out / "gpu1" / "etc" / "systemd" / "system").glob("*.mount"))
    assert left == ["home.mount"]
    _render(spec, out)
    assert not (out / "gpu2").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".gpuforge-render"]

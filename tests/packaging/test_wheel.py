"""A wheel, installed into a clean venv outside the checkout, works: check, render, schema, and
(on the lab) plan. Built and installed offline: no build isolation, no package index.

The clean venv gets gpuforge from the wheel only; its third-party dependencies come from the
test's own environment through a ``.pth`` line (a plain path entry: the editable install's
finder there is not activated, so ``import gpuforge`` can only find the wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuforge.render import render_cluster
from gpuforge.render.files import Secrets
from gpuforge.spec import load_spec
from tests.conftest import REPO, LabCluster


@dataclass(frozen=True)
class WheelEnv:
    wheel: Path
    python: Path
    gpuforge: Path
    workdir: Path

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.gpuforge), *args],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": "", **(env or {})},
        )


def run(argv: list[str], cwd: Path) -> str:
    cp = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, f"{argv}: rc={cp.returncode}\n{cp.stdout}\n{cp.stderr}"
    return cp.stdout


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WheelEnv]:
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(REPO)], root)
    (wheel,) = dist.glob("gpuforge-*.whl")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)], root)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], root)
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).strip())
    (site / "zz-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = root / "work"
    work.mkdir()
    yield WheelEnv(wheel, python, venv / "bin" / "gpuforge", work)


def test_the_wheel_holds_every_package_and_template() -> None:
    # pyproject lists packages explicitly (templates/ is mapped in): the list must match the tree.
    packages = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "gpuforge").rglob("__init__.py")}
    packages |= {
        ".".join(("gpuforge", *d.relative_to(REPO).parts))
        for d in [REPO / "templates", *(REPO / "templates").rglob("*")]
        if d.is_dir() and "__pycache__" not in d.parts
    }
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed == packages, f"pyproject's package list is out of step: {sorted(listed ^ packages)}"


def test_wheel_contents(wheel_env: WheelEnv) -> None:
    names = set(zipfile.ZipFile(wheel_env.wheel).namelist())
    templates = {
        "gpuforge/templates/" + str(p.relative_to(REPO / "templates"))
        for p in (REPO / "templates").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert templates and templates <= names, sorted(templates - names)
    modules = {str(p.relative_to(REPO)) for p in (REPO / "gpuforge").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert "gpuforge/validator/report.schema.json" in names
    assert not any(n.startswith(("tests/", "deploys/")) for n in names)


def test_gpuforge_comes_from_the_wheel(wheel_env: WheelEnv) -> None:
    out = run([str(wheel_env.python), "-c", "import gpuforge; print(gpuforge.__file__)"], wheel_env.workdir)
    assert str(REPO) not in out and "site-packages" in out, out


def test_check_render_and_schema_from_the_wheel(wheel_env: WheelEnv) -> None:
    spec = wheel_env.workdir / "slurm-h100.yaml"
    spec.write_text((REPO / "inventories" / "slurm-h100.yaml").read_text())
    cp = wheel_env.run("check", str(spec))
    assert cp.returncode == 0, cp.stdout + cp.stderr

    out = wheel_env.workdir / "out"
    cp = wheel_env.run("render", str(spec), "-o", str(out))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    expected = render_cluster(load_spec(spec), Secrets.redacted())
    for node, files in expected.items():
        for f in files:
            written = out / node / f.path.lstrip("/")
            assert written.is_file(), f"{node}: {f.path} not rendered from the wheel"
            if not f.secret:
                assert written.read_bytes() == f.data, f"{node}: {f.path} differs from the checkout's render"

    cp = wheel_env.run("schema")
    assert cp.returncode == 0 and json.loads(cp.stdout)["title"], cp.stderr


@pytest.mark.lab
def test_plan_from_the_wheel_on_the_lab(wheel_env: WheelEnv, lab_cluster: LabCluster) -> None:
    """The deploys run from the installed package (not the checkout): a plan over the applied lab."""
    cp = wheel_env.run("plan", str(lab_cluster.spec_path), "--json", env=lab_cluster.env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    plan = json.loads(cp.stdout)
    assert sorted(plan["hosts"]) == sorted(n.name for n in lab_cluster.lab.state.nodes), plan
    assert not plan.get("errors"), plan

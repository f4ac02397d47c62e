"""NVIDIA's published releases and support matrix: the warnings of ``gpuforge check`` (never refusals).

The date is pinned (2026-11-26, the day the table was last read) so that end-of-life verdicts do
not change under the tests; the expectations are written from the cited pages, not computed from
the table (``gpuforge.spec.nvidia_releases.SOURCES``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec import SpecError, load_spec, parse_spec
from gpuforge.spec import nvidia_releases as rel
from gpuforge.spec.nvidia_support import support_warnings
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
TODAY = date(2026, 11, 26)


def example(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(yaml.safe_load((REPO / f"inventories/{name}.yaml").read_text())))
    return data


def warnings_of(data: dict[str, Any], today: date = TODAY) -> list[str]:
    return [w.format() for w in support_warnings(parse_spec(yaml_text.dump(data)), today)]


def check(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", "check", str(path), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --------------------------------------------------------------------------- releases


UNPUBLISHED_FILES = ["pyxis-0.24.0.tar.gz", "enroot_4.1.2-1_amd64.deb", "enroot+caps_4.1.2-1_amd64.deb",
                     "nvidia-mig-manager_0.15.0-1_amd64.deb"]  # fmt: skip


def spec_file(tmp_path: Path, version: str) -> Path:
    data = example("slurm-h100")
    data["versions"]["driver"]["version"] = version
    # pins of the release files nothing publishes a sha256 for (a test's value): only the driver's warning is left
    data["sources"]["artifact_sha256"] = {f: "ab" * 32 for f in UNPUBLISHED_FILES}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(data))
    return path


def test_an_unknown_branch_is_a_warning_naming_the_branches_and_releases(tmp_path: Path) -> None:
    """Unknown is not forbidden: a well-formed release of a branch the table lacks is checked, not refused."""
    result = check(spec_file(tmp_path, "999.10.01"))
    assert result.returncode == 0, result.stderr
    assert "warning: versions.driver.version: driver branch 999 (999.10.01) has no releases in gpuforge's table, " \
        "so gpuforge could not check that NVIDIA published it" in result.stderr  # fmt: skip
    for known in ("535: 535.54.03", "535.309.01", "580: 580.65.06", "580.173.02", "595: 595.58.03 595.71.05 595.91.07",
                  "620: 620.70.06"):  # fmt: skip
        assert known in result.stderr, known
    assert ": OK (slurm cluster" in " ".join(result.stdout.split())


@pytest.mark.parametrize("version", ["580.999.01", "620.80.01"])
def test_an_unlisted_release_of_a_known_branch_warns_and_strict_exits_2(tmp_path: Path, version: str) -> None:
    """check exits 0 with the warning; check --strict prints it, then the error line, and exits 2."""
    path = spec_file(tmp_path, version)
    branch = version.split(".")[0]
    warning = (
        f"warning: versions.driver.version: driver {version} is not a release of branch {branch} in gpuforge's table"
    )
    relaxed = check(path)
    assert relaxed.returncode == 0 and warning in relaxed.stderr, relaxed.stderr
    strict = check(path, "--strict")
    assert strict.returncode == 2, strict.stderr
    lines = strict.stderr.splitlines()
    assert warning in lines[0] and lines[-1] == "error: --strict: 1 warning(s)", strict.stderr
    assert "Traceback" not in strict.stderr and strict.stdout == ""
    as_json = json.loads(check(path, "--strict", "--json").stdout)
    assert as_json["ok"] is False and as_json["warnings"][0]["path"] == "versions.driver.version"


def test_plan_strict_stops_on_warnings_before_any_host(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuforge", "plan", str(spec_file(tmp_path, "580.999.01")), "--strict"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[-1] == "error: --strict: 1 warning(s)"


UNWARNED = [("580.173.02", False), ("595.91.07", False), ("535.247.01", False), ("620.70.06", False)]


@pytest.mark.parametrize(("version", "warned"), [*UNWARNED, ("580.173.03", True), ("580.95", True), ("580.95.x", None)])
def test_only_releases_of_the_table_go_unwarned(version: str, warned: bool | None) -> None:
    """Known releases pass silently, unlisted ones warn, and only a malformed version is refused."""
    data = example("slurm-h100")
    data["versions"]["driver"]["version"] = version
    if warned is None:
        with pytest.raises(SpecError, match=r"versions\.driver"):
            parse_spec(yaml_text.dump(data))
        return
    found = [w for w in warnings_of(data) if f"driver {version} is not a release of branch" in w]
    assert bool(found) is warned


def test_r620_is_a_long_term_branch_with_its_first_release() -> None:
    """NVIDIA's R620 long term support branch (drivers-620) and its first release (driver-redist-620)."""
    assert rel.BRANCHES[620].designation == "LTSB" and rel.BRANCHES[620].end_of_life == "2029-09"
    assert rel.RELEASES[620] == ("620.70.06",)
    data = example("slurm-h100")
    data["versions"]["driver"]["version"] = "620.70.06"
    assert not [w for w in warnings_of(data) if w.startswith("versions.driver.version")]


def test_table_rows_are_consistent() -> None:
    """Every operator driver is a known release; every branch with releases has a lifecycle row; every
    row names a source."""
    for version, op in rel.GPU_OPERATOR.items():
        assert op.default_driver in op.drivers, version
        for d in op.drivers:
            assert d in rel.RELEASES[int(d.split(".")[0])], (version, d)
        assert set(op.cites) <= set(rel.SOURCES)
    assert set(rel.RELEASES) <= set(rel.BRANCHES)
    assert {b.cite for b in rel.BRANCHES.values()} <= set(rel.SOURCES)
    assert {c.cite for c in rel.CURRENT.values()} <= set(rel.SOURCES)
    # the GPU Operator v26.7.0 component matrix, written out
    assert rel.GPU_OPERATOR["v26.7.0"].drivers == ("610.57.04", "595.91.07", "580.173.02", "535.309.01")


# --------------------------------------------------------------------------- defaults are supported today


@pytest.mark.parametrize("name", ["slurm-h100", "k8s-gpu-operator"])
def test_example_driver_pins_are_supported_today(name: str) -> None:
    """The examples pin drivers NVIDIA supports on 2026-11-26 (issue 32 item 1)."""
    spec = load_spec(REPO / f"inventories/{name}.yaml")
    assert spec.versions.driver is not None
    assert not [w for w in support_warnings(spec, TODAY) if w.path == "versions.driver.version"]
    assert spec.versions.driver.version in rel.GPU_OPERATOR["v26.7.0"].drivers


def test_example_pins_fail_a_year_on() -> None:
    """The verdicts follow the dates: R595 (end of life March 2027) is reported after it."""
    spec = load_spec(REPO / "inventories/k8s-gpu-operator.yaml")
    later = [w.message for w in support_warnings(spec, date(2027, 4, 1)) if w.path == "versions.driver.version"]
    assert len(later) == 1 and "driver branch 595 reached NVIDIA's end of life (March 2027" in later[0]
    assert "580 (long term support branch, until June 2028)" in later[0]


# --------------------------------------------------------------------------- warnings


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("535.309.01", "driver branch 535 reached NVIDIA's end of life (June 2026"),
        ("550.163.01", "driver branch 550 reached NVIDIA's end of life (August 2025"),
        ("570.211.01", "driver branch 570 reached NVIDIA's end of life (February 2026"),
        ("590.48.01", "driver branch 590 is a new feature branch"),
        ("610.57.04", "driver branch 610 reached NVIDIA's end of life (August 2026"),
        ("580.173.02", None),
        ("595.91.07", None),
    ],
)
def test_driver_branch_lifecycle(version: str, expected: str | None) -> None:
    data = example("slurm-h100")
    data["versions"]["driver"]["version"] = version
    if int(version.split(".")[0]) < 580:  # a CUDA 12 driver: the example's CUDA 13 DCGM pins stay valid
        data["versions"]["cuda_toolkit"] = "12.4"
    found = [w for w in warnings_of(data) if w.startswith("versions.driver.version")]
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_kubernetes_outside_the_operators_range_warns_per_os() -> None:
    """GPU Operator v26.7.0 validates Ubuntu 22.04 with 1.33-1.36 and Ubuntu 24.04 with 1.32-1.36."""
    data = example("k8s-gpu-operator")
    data["versions"]["kubernetes"] = "1.32.4"
    found = warnings_of(data)
    assert found == [
        "versions.kubernetes: Kubernetes 1.32.4 on ubuntu22.04 is outside GPU Operator v26.7.0's validated range "
        "1.33-1.36 (NVIDIA/cloud-native-docs gpu-operator/platform-support.rst (commit "
        "187a4a5bdc9d6ca222ee59cde894bad4ab20eec0, GPU Operator v26.7.0))"
    ]
    data["cluster"]["os"] = "ubuntu24.04"
    assert warnings_of(data) == []
    data["versions"]["kubernetes"] = "1.36.1"
    data["cluster"]["os"] = "debian12"
    data["versions"]["driver"]["source"] = "nvidia"
    assert any("GPU Operator v26.7.0 is not validated on debian12" in w for w in warnings_of(data))


def test_operator_driver_must_be_one_it_ships() -> None:
    data = example("k8s-gpu-operator")
    data["versions"]["kubernetes"] = "1.34.2"
    data["kubernetes"]["gpu_operator"]["driver"] = "operator"
    assert warnings_of(data) == []  # 595.91.07: the v26.7.0 default
    data["versions"]["driver"]["version"] = "580.167.08"
    assert warnings_of(data) == [
        "versions.driver.version: GPU Operator v26.7.0 ships driver containers for 610.57.04, 595.91.07, "
        "580.173.02, 535.309.01, not 580.167.08 (gpu_operator.driver: operator; NVIDIA/cloud-native-docs "
        "gpu-operator/life-cycle-policy.rst, 'GPU Operator Component Matrix', every version in git)"
    ]


def test_older_operator_is_deprecated_and_unknown_ones_are_named() -> None:
    data = example("k8s-gpu-operator")
    data["versions"]["kubernetes"] = "1.34.2"
    data["versions"]["gpu_operator"] = "v26.3.3"
    assert any("GPU Operator v26.3.3 is deprecated" in w for w in warnings_of(data))
    data["versions"]["gpu_operator"] = "v24.9.2"
    assert any(
        "GPU Operator v24.9.2 is not in gpuforge's table (known: v26.7.0, v26.3.0" in w for w in warnings_of(data)
    )


def test_cuda_toolkit_newer_than_the_driver_warns() -> None:
    """CUDA 13 needs a CUDA 13 driver (R580 or later); R535 supports CUDA 12 at most."""
    data = example("lab")
    data["versions"]["cuda_toolkit"] = "13.0"
    found = [w for w in warnings_of(data) if w.startswith("versions.cuda_toolkit")]
    assert len(found) == 1 and "CUDA 13.0 needs a CUDA 13 driver; branch 535 supports CUDA 12 at most" in found[0]


def test_pyxis_needs_enroot_3_1() -> None:
    """pyxis' packages depend on enroot (>= 3.1.0) (NVIDIA/pyxis debian/control, pyxis.spec)."""
    data = example("slurm-h100")
    data["versions"]["enroot"] = "3.0.2"
    assert warnings_of(data) == [
        "versions.enroot: pyxis needs enroot 3.1.0 or newer (github.com/NVIDIA/pyxis README.md 'Installation'; "
        "debian/control; pyxis.spec)"
    ]


def test_check_prints_warnings_and_exits_0(tmp_path: Path) -> None:
    """Outside the matrix is reported, not refused; --json carries the warnings."""
    data = example("k8s-gpu-operator")
    data["versions"]["kubernetes"] = "1.32.4"
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(data))
    result = check(path)
    assert result.returncode == 0, result.stderr
    assert f"{path}: warning: versions.kubernetes: Kubernetes 1.32.4 on ubuntu22.04" in result.stderr
    assert "OK (kubernetes cluster 'kgpu'" in " ".join(result.stdout.split())
    result = check(path, "--json")
    doc = json.loads(result.stdout)
    # helm 4.2 supports 1.33-1.36 only (support_windows): 1.32 is outside its skew too
    # then the add-ons whose release files have no known sha256 (gpuforge.bundle.digest_warnings)
    paths = [w["path"] for w in doc["warnings"]]
    assert doc["ok"] is True and paths[:2] == ["versions.kubernetes", "versions.helm"]
    assert set(paths[2:]) == {"sources.artifact_sha256"}

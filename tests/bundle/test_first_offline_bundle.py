"""The first bundle of an offline spec: ``bundle`` builds from the spec before its key is pinned
(the build is what prints the fingerprint), ``check`` says how to get it, and the printed pin makes
the spec whole. Only ``sources.bundle_fingerprint`` is waived: every other problem still refuses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests import yaml_text
from tests.bundle.conftest import run_bundle
from tests.conftest import REPO, run_cli

PIN_LINE = re.compile(r"^  pin it: sources\.bundle_fingerprint: ([0-9A-F]{40})$", re.MULTILINE)


def offline_lab(tmp_path: Path, **sources: Any) -> Path:
    """The lab's spec (nothing to download: no GPU nodes) in offline mode on ``tmp_path/bundle``."""
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    data["sources"] = {"mode": "offline", "bundle_dir": str(tmp_path / "bundle"), **sources}
    path = tmp_path / "offline.yaml"
    path.write_text(yaml_text.dump(data))
    return path


def test_check_says_how_to_get_the_fingerprint(tmp_path: Path) -> None:
    cp = run_cli("check", str(offline_lab(tmp_path)))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert (
        "sources.bundle_fingerprint: mode offline needs bundle_fingerprint: the signing key fingerprint "
        "'gpuforge bundle' printed (without it a changed bundle could re-sign itself); 'gpuforge bundle SPEC -o DIR' "
        "builds from this spec without it and ends with the line to add: "
        "'pin it: sources.bundle_fingerprint: <40 hex digits>'"
    ) in " ".join(cp.stderr.split())


def test_bundle_builds_from_the_unpinned_offline_spec_and_its_pin_completes_it(tmp_path: Path) -> None:
    spec = offline_lab(tmp_path)
    built = run_bundle(str(spec), "-o", str(tmp_path / "bundle"))
    assert built.returncode == 0, built.stdout + built.stderr
    pins = PIN_LINE.findall(built.stdout)
    assert len(pins) == 1, built.stdout
    pinned = offline_lab(tmp_path, bundle_fingerprint=pins[0])
    assert run_cli("check", str(pinned)).returncode == 0
    verified = run_bundle(str(pinned), "--verify", str(tmp_path / "bundle"))
    assert verified.returncode == 0 and f"OK (signed by {pins[0]})" in verified.stdout, verified.stderr


def test_bundle_still_refuses_the_spec_s_other_problems(tmp_path: Path) -> None:
    data = yaml.safe_load(offline_lab(tmp_path).read_text())
    del data["sources"]["bundle_dir"]
    spec = tmp_path / "no-dir.yaml"
    spec.write_text(yaml_text.dump(data))
    cp = run_bundle(str(spec), "-o", str(tmp_path / "bundle"))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "sources.bundle_dir: mode offline needs bundle_dir" in cp.stderr
    assert "bundle_fingerprint" not in cp.stderr and not (tmp_path / "bundle").exists()

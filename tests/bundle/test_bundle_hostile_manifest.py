"""A bundle's manifest.json that is a link to /dev/zero, a FIFO or a huge file is never read:
``gpuforge bundle --verify`` reports it at once (no traceback, no hang), and a build starts afresh."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuforge.bundle.build_ledger import _previous_manifest
from gpuforge.bundle.layout import MANIFEST
from gpuforge.bundle.signing import BUNDLE_KEY
from gpuforge.bundle.verify import verify_bundle
from gpuforge.spec.limits import BUNDLE_MANIFEST_BYTES
from tests.conftest import REPO

FINGERPRINT = "A" * 40


def hostile_bundle(tmp_path: Path, kind: str) -> Path:
    """A bundle folder with a key file and a manifest.json that is ``kind``."""
    bundle = tmp_path / "bundle"
    (bundle / BUNDLE_KEY).parent.mkdir(parents=True)
    (bundle / BUNDLE_KEY).write_bytes(b"not a key")
    manifest = bundle / MANIFEST
    if kind == "link-to-dev-zero":
        manifest.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(manifest)
    else:
        with manifest.open("wb") as f:
            f.truncate(BUNDLE_MANIFEST_BYTES.value + 1)
    return bundle


@pytest.mark.parametrize("kind", ["link-to-dev-zero", "fifo", "huge"])
def test_a_build_never_reads_such_a_previous_manifest(tmp_path: Path, kind: str) -> None:
    bundle = hostile_bundle(tmp_path, kind)
    started = time.perf_counter()
    assert _previous_manifest(bundle) == {}
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("kind", ["link-to-dev-zero", "fifo"])
def test_verify_reports_such_a_manifest_at_once(tmp_path: Path, kind: str) -> None:
    bundle = hostile_bundle(tmp_path, kind)
    started = time.perf_counter()
    problems = verify_bundle(bundle, FINGERPRINT)
    assert time.perf_counter() - started < 5.0
    assert problems and MANIFEST in problems[0], problems


def test_cli_verify_of_a_manifest_linked_to_dev_zero_exits_without_a_traceback(tmp_path: Path) -> None:
    """The reproducer: ``gpuforge bundle --verify DIR`` read /dev/zero until memory ran out."""
    bundle = hostile_bundle(tmp_path, "link-to-dev-zero")
    argv = [sys.executable, "-m", "gpuforge", "bundle", "--verify", str(bundle), "--fingerprint", FINGERPRINT]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert "Traceback" not in cp.stderr, cp.stderr
    assert cp.returncode == 1 and MANIFEST in cp.stderr, (cp.returncode, cp.stderr)

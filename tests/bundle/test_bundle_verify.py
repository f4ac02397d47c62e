"""verify_bundle refuses what must never reach a node: links, FIFOs, unlisted files, a malformed
manifest (a problem reported, never a traceback), and it verifies nothing without a pinned key.
apply runs it before any host is touched."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bundle.layout import FORMAT
from gpuforge.bundle.verify import NOT_ANCHORED, verify_bundle
from tests.helpers import bundle_fingerprint, write_bundle_manifest


def bundle(tmp_path: Path, text: Callable[[dict[str, Any]], str] = json.dumps) -> Path:
    b = tmp_path / "bundle"
    (b / "apt" / "nvidia-container").mkdir(parents=True)
    (b / "apt" / "nvidia-container" / "Packages").write_text("Package: x\nVersion: 1\n")
    (b / "artifacts").mkdir()
    (b / "artifacts" / "pyxis-0.24.0.tar.gz").write_bytes(b"tgz")
    write_bundle_manifest(b, text=text)
    return b


def verify(b: Path) -> list[str]:
    """verify_bundle with the key the bundle was signed with pinned."""
    return verify_bundle(b, bundle_fingerprint(b))


def test_a_good_bundle_verifies(tmp_path: Path) -> None:
    assert verify(bundle(tmp_path)) == []


def test_without_a_pinned_key_nothing_is_verified(tmp_path: Path) -> None:
    assert verify_bundle(bundle(tmp_path)) == [NOT_ANCHORED]


def _symlink_to_dev_zero(b: Path) -> None:
    (b / "artifacts" / "enroot_4.1.2-1_amd64.deb").symlink_to("/dev/zero")


def _replace_listed_file_by_a_link(b: Path) -> None:
    target = b / "artifacts" / "pyxis-0.24.0.tar.gz"
    target.unlink()
    target.symlink_to("/etc/hostname")


def _dangling_link(b: Path) -> None:
    (b / "apt" / "nvidia-container" / "x.deb").symlink_to(b / "nowhere")


def _linked_directory(b: Path) -> None:
    (b / "apt" / "nvidia-cuda").symlink_to("/etc")


def _fifo(b: Path) -> None:
    os.mkfifo(b / "artifacts" / "hang.deb")


def _unlisted_artifact(b: Path) -> None:
    (b / "artifacts" / "enroot_4.1.2-1_amd64.deb").write_bytes(b"put here by someone")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_symlink_to_dev_zero, "artifacts/enroot_4.1.2-1_amd64.deb: a symbolic link"),
        (_replace_listed_file_by_a_link, "artifacts/pyxis-0.24.0.tar.gz: a symbolic link"),
        (_dangling_link, "apt/nvidia-container/x.deb: a symbolic link"),
        (_linked_directory, "apt/nvidia-cuda: a symbolic link"),
        (_fifo, "artifacts/hang.deb: not a regular file"),
        (_unlisted_artifact, "artifacts/enroot_4.1.2-1_amd64.deb: not in the manifest"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
def test_what_must_not_reach_a_node_is_refused(tmp_path: Path, mutate: Callable[[Path], None], expected: str) -> None:
    b = bundle(tmp_path)
    mutate(b)
    problems = verify(b)
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([1], "manifest entry 0: not an object"),
        ([{"path": "/etc/passwd", "size": 1, "sha256": "0" * 64}], "manifest entry 0: bad path"),
        ([{"path": "../x", "size": 1, "sha256": "0" * 64}], "manifest entry 0: bad path"),
        ([{"path": "artifacts/x", "size": "3", "sha256": "0" * 64}], "manifest entry 0 (artifacts/x): bad size"),
        ([{"path": "artifacts/x", "size": True, "sha256": "0" * 64}], "manifest entry 0 (artifacts/x): bad size"),
        ([{"path": "artifacts/x", "size": 3, "sha256": "abc"}], "manifest entry 0 (artifacts/x): bad sha256"),
    ],
)
def test_a_malformed_manifest_is_reported_not_a_crash(tmp_path: Path, entries: list[object], expected: str) -> None:
    """Even signed by the pinned key, a malformed entry is a problem reported, not a traceback."""
    b = bundle(tmp_path, lambda _m: json.dumps({"format": FORMAT, "files": entries, "complete": True}))
    assert any(p.startswith(expected) for p in verify(b)), verify(b)


@pytest.mark.parametrize("text", ["[]", '{"files": {"a": 1}}', "not json", '{"complete": true}'])
def test_an_unreadable_manifest_is_one_problem(tmp_path: Path, text: str) -> None:
    b = bundle(tmp_path, lambda _m: text)
    (problem,) = verify(b)
    assert "cannot read the manifest" in problem

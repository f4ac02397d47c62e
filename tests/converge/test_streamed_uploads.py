"""Bundle files are streamed (issue 14, item 7): digest and upload read the control-host file in
blocks; nothing holds a whole package in memory, however large the bundle."""

from __future__ import annotations

import hashlib
import io
import os
import tracemalloc
from pathlib import Path

from gpuforge.deploy.converge import Layer, LayerFacts, StepKind, plan_layer
from gpuforge.render.files import LocalSource, RenderedFile

SIZE = 48 * 2**20


def _big_file(tmp_path: Path) -> Path:
    path = tmp_path / "nvidia-driver_550.163.01-1_amd64.deb"
    with open(path, "wb") as f:
        for i in range(SIZE // 2**20):
            f.write(bytes([i % 251]) * 2**20)
    return path


def test_a_bundle_file_is_hashed_planned_and_opened_without_being_read_whole(tmp_path: Path) -> None:
    path = _big_file(tmp_path)
    want = RenderedFile("/var/lib/gpuforge/bundle/apt/cuda/x.deb", LocalSource(str(path)))
    tracemalloc.start()
    try:
        digest = want.sha256
        steps, changed = plan_layer(Layer("nvidia-repos", files=[want]), LayerFacts())
        with want.open() as f:
            assert not isinstance(f, io.BytesIO) and os.path.samefile(f.name, path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"peak {peak} bytes while handling a {SIZE}-byte file"
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [(s.kind, s.summary) for s in steps] == [
        (StepKind.UPLOAD, f"write {want.path} ({SIZE} bytes, 0644 root:root)")
    ]
    assert changed == {want.path}
    # The node already has it: nothing to do, and nothing was read but the digest (cached per version).
    have = {want.path: {"type": "file", "sha256": digest, "mode": "0644", "owner": "root", "group": "root"}}
    assert plan_layer(Layer("nvidia-repos", files=[want]), LayerFacts(files=have)) == ([], set())


def test_a_changed_bundle_file_is_hashed_again(tmp_path: Path) -> None:
    path = tmp_path / "Packages"
    path.write_bytes(b"Package: a\n")
    src = LocalSource(str(path))
    first = src.sha256
    path.write_bytes(b"Package: b\n\n")
    assert src.sha256 != first == hashlib.sha256(b"Package: a\n").hexdigest()

"""Review item 8: the image build writes nothing through a link planted beforehand.

It wrote the fitted spec to ``.gpuforge-image-build-<pid>.yaml`` beside the spec (predictable:
a link there overwrote its target) and wrote files inside the image tree (``/etc/hostname``, the
host keys unit, the image record) through whatever links the build's packages had left there,
which an absolute link sends to the build host's own files.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuforge.image import build, manifest, strip
from gpuforge.image.safe_files import UnsafePath, write_in_tree
from gpuforge.spec.cluster import load_cluster
from tests.conftest import REPO


def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_text("precious\n")
    return v


def test_the_fitted_spec_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    v = victim(tmp_path)
    spec = tmp_path / "site" / "spec.yaml"
    spec.parent.mkdir()
    spec.write_text((REPO / "inventories" / "lab.yaml").read_text())
    (spec.parent / f".gpuforge-image-build-{os.getpid()}.yaml").symlink_to(v)
    lab: Any = SimpleNamespace(ssh_key="/k", known_hosts="/kh", mirror_url="http://10.0.0.1:3142")
    with build.build_spec_file(load_cluster(spec), lab) as fitted:
        assert fitted.parent == spec.parent and not fitted.is_symlink()
        assert fitted.stat().st_mode & 0o077 == 0, "0600: the fitted spec is the build's own"
    assert v.read_text() == "precious\n" and not fitted.exists()


def test_strip_and_the_record_never_write_outside_the_tree(tmp_path: Path) -> None:
    v = victim(tmp_path)
    tree = tmp_path / "tree"
    (tree / "etc/systemd/system").mkdir(parents=True)
    (tree / "etc/hostname").symlink_to(v)  # absolute: the build host's file
    (tree / strip.HOST_KEYS_UNIT_PATH).symlink_to(v)
    strip.strip_tree(str(tree))
    assert v.read_text() == "precious\n"
    assert (tree / "etc/hostname").read_text() == "localhost\n" and not (tree / "etc/hostname").is_symlink()
    (tree / "etc/gpuforge").symlink_to(tmp_path)  # a folder leading out of the tree
    with pytest.raises(UnsafePath, match="outside the image tree"):
        build.finish_tree(str(tree), {"layers": {}}, [], set(), lambda m: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree", "victim"]


def test_outputs_replace_a_planted_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    v = victim(tmp_path)
    out = tmp_path / "image-manifest.json"
    out.symlink_to(v)
    manifest.write_json(out, {"a": 1})
    assert v.read_text() == "precious\n" and not out.is_symlink() and '"a": 1' in out.read_text()
    path = write_in_tree(str(tmp_path / "t"), "/etc/x/y", b"z")
    assert Path(path).read_bytes() == b"z" and not [p for p in (tmp_path / "t/etc/x").iterdir() if p.name != "y"]

"""Host kernel limits that grow with the lab's node count (a fake /proc/sys as data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.lab import hostlimits
from gpuforge.lab.hostlimits import LIMITS, ensure_limits
from gpuforge.lab.system import LabError


def fake_proc(tmp_path: Path, instances: int, watches: int) -> Path:
    d = tmp_path / "fs" / "inotify"
    d.mkdir(parents=True)
    (d / "max_user_instances").write_text(f"{instances}\n")
    (d / "max_user_watches").write_text(f"{watches}\n")
    return tmp_path


def test_debian_defaults_are_raised_for_48_nodes(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, 128, 65536)
    said: list[str] = []
    made = ensure_limits(48, said.append, root=str(root))
    assert made == ["fs.inotify.max_user_instances=704", "fs.inotify.max_user_watches=262144"]
    assert (root / "fs/inotify/max_user_instances").read_text() == "704\n"
    assert said == ["raised host limits for 48 nodes: " + ", ".join(made)]
    assert ensure_limits(48, said.append, root=str(root)) == []  # enough now: nothing written, nothing said
    assert len(said) == 1


def test_limits_are_never_lowered(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, 100000, 10_000_000)
    assert ensure_limits(3, print, root=str(root)) == []
    assert (root / "fs/inotify/max_user_instances").read_text() == "100000\n"


def test_22_nodes_get_room_beyond_what_they_hold() -> None:
    """The failure the issue saw at node22 (about 5 instances per idle node, on top of the host's own)."""
    instances = next(lim for lim in LIMITS if lim.key == "fs.inotify.max_user_instances")
    assert instances.need(22) >= 128 + 2 * 5 * 22


def test_read_only_host_is_refused_with_the_exact_sysctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = fake_proc(tmp_path, 128, 65536)
    real_open = open

    def read_only(path: str, mode: str = "r", *a: object, **k: object) -> object:
        if "w" in mode:
            raise PermissionError(13, "Read-only file system", path)
        return real_open(path, mode)

    monkeypatch.setattr(hostlimits, "open", read_only, raising=False)
    want = r"run as root: sysctl -w fs\.inotify\.max_user_instances=416 fs\.inotify\.max_user_watches=163840$"
    with pytest.raises(LabError, match=want):
        ensure_limits(24, print, root=str(root))
    assert (root / "fs/inotify/max_user_instances").read_text() == "128\n"

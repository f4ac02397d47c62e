"""The lab's stand-in for shared storage: host folders bind-mounted into some nodes (no root needed here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuforge.lab import cli, core, node
from gpuforge.lab.lab_record import LabPaths, LabState, NodeState, SharedFolder, load_state, save_state
from gpuforge.lab.plan import PlanError, check_shared

STATE = SharedFolder("slurm-state", "/shared", ("node1", "node2"))


def test_shared_folders_are_saved_and_an_older_state_file_has_none(tmp_path: Path) -> None:
    st = LabState("gfha", "10.213.11.0/24", "gf-gfha", "10.213.11.1", [NodeState("node1", "10.213.11.11")])
    st.shared = [STATE]
    path = str(tmp_path / "lab.json")
    save_state(st, path)
    assert json.loads(Path(path).read_text())["shared"] == [
        {"name": "slurm-state", "path": "/shared", "nodes": ["node1", "node2"]}
    ]
    assert load_state(path) == st
    old = json.loads(Path(path).read_text())
    del old["shared"]  # written before shared folders existed
    Path(path).write_text(json.dumps(old))
    assert load_state(path).shared == []  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("folders", "message"),
    [
        ([("Bad_Name", "/shared", ["node1"])], "unique name"),
        ([("a", "/shared", ["node1"]), ("a", "/other", ["node2"])], "unique name"),
        ([("a", "shared", ["node1"])], "plain absolute path"),
        ([("a", "/", ["node1"])], "plain absolute path"),
        ([("a", "/etc/slurm", ["node1"])], "system's folders"),
        ([("a", "/shared/../etc", ["node1"])], "plain absolute path"),
        ([("a", "/sha:red", ["node1"])], "plain absolute path"),
        ([("a", "/shared", ["node4"])], "has no node4"),
    ],
)
def test_bad_shared_folders_are_refused_naming_the_folder(folders: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        check_shared(folders, 3)
    check_shared([("slurm-state", "/shared/slurm", ["node1", "node2"]), ("home", "/home", ["node3"])], 3)


def test_a_node_boots_with_its_shared_folders_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(node, "spawn_detached", lambda cmd, log: seen.append(cmd))
    paths = LabPaths("gfha", root=str(tmp_path))
    st = LabState("gfha", "10.213.11.0/24", "gf-gfha", "10.213.11.1", shared=[STATE])
    node.spawn(paths, "gfha", "node2", "/rootfs", "/run/netns/x", core._binds(st, paths, "node2"))
    node.spawn(paths, "gfha", "node3", "/rootfs", "/run/netns/y", core._binds(st, paths, "node3"))
    host = str(tmp_path / "gfha" / "shared" / "slurm-state")
    assert [a for a in seen[0] if a.startswith("--bind")] == [f"--bind={host}:/shared"]
    assert not [a for a in seen[1] if a.startswith("--bind")]


def test_changed_shared_folders_restart_only_the_nodes_they_touch(tmp_path: Path) -> None:
    paths = LabPaths("gfha", root=str(tmp_path))
    assert core._rebound([], [STATE], paths) == {"node1", "node2"}
    assert (tmp_path / "gfha" / "shared" / "slurm-state").is_dir()
    assert core._rebound([STATE], [STATE], paths) == set()  # the same: nothing restarts
    grown = SharedFolder("slurm-state", "/shared", ("node1", "node2", "node3"))
    assert core._rebound([STATE], [grown], paths) == {"node3"}


def test_the_cli_reads_name_path_and_a_hostlist() -> None:
    assert cli._shared_folder("slurm-state:/shared:node[1-2]") == STATE
    for bad in ("slurm-state:/shared", "a::node1", "a:/b:node[2-1]"):
        with pytest.raises(PlanError, match="--shared"):
            cli._shared_folder(bad)
    res = CliRunner().invoke(cli.app, ["up", "--name", "gfha", "--shared", "x:/etc:node1"])
    assert res.exit_code == 2 and "/etc" in res.output and "outside the system" in res.output

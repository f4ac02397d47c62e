"""Lab nodes on several Debian releases (``gpuforge lab up --os``): the choice of each node's release,
the re-image of a node whose release changes, and the spec fitted to the nodes' releases."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpuforge.lab import cli, core, node, plan
from gpuforge.lab.lab_record import LabPaths, LabState, NodeState, load_state
from gpuforge.lab.spec import lab_spec_data

REPO = Path(__file__).resolve().parents[2]


def test_os_values_name_every_node_or_one() -> None:
    assert plan.parse_releases([], 3) == (None, {})
    assert plan.parse_releases(["debian13"], 3) == ("debian13", {})
    assert plan.parse_releases(["debian13", "node1=debian12"], 3) == ("debian13", {"node1": "debian12"})
    # a later value for every node overrides the nodes named before it
    assert plan.parse_releases(["node1=debian12", "debian13"], 3) == ("debian13", {})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["debian11"], "the lab runs debian12, debian13"),
        (["node4=debian13"], "the lab has node1..node3"),
        (["gpu1=debian13"], "the lab has node1..node3"),
        (["node1=ubuntu24.04"], "the lab runs debian12, debian13"),
    ],
)
def test_bad_os_values_are_refused_with_exit_2_before_anything_runs(values: list[str], message: str) -> None:
    with pytest.raises(plan.PlanError, match=message):
        plan.parse_releases(values, 3)
    res = CliRunner().invoke(cli.app, ["up", "--name", "gfrel", *[a for v in values for a in ("--os", v)]])
    assert res.exit_code == 2 and message in res.output, res.output


def _state(*releases: str) -> LabState:
    nodes = [NodeState(f"node{i}", f"10.213.7.{10 + i}", r) for i, r in enumerate(releases, 1)]
    return LabState("other", "10.213.7.0/24", "gf-other", "10.213.7.1", nodes, "/k", "/kh", "http://10.213.7.1:3142")


def test_each_node_keeps_its_release_unless_one_is_named() -> None:
    plans = plan.node_plan("10.213.7.0/24", 4)
    old = _state("debian13", "debian12", "debian12")
    assert core._node_releases(None, plans, (None, {})) == dict.fromkeys(
        ["node1", "node2", "node3", "node4"], "debian12"
    )
    assert core._node_releases(old, plans, (None, {"node3": "debian13"})) == {
        "node1": "debian13", "node2": "debian12", "node3": "debian13", "node4": "debian12",
    }  # fmt: skip
    assert set(core._node_releases(old, plans, ("debian13", {})).values()) == {"debian13"}


def _copy_lab(tmp_path: Path) -> tuple[LabPaths, dict[str, str]]:
    """Two base trees standing in for the bookworm and trixie rootfs; a lab in copy mode under tmp_path."""
    bases = {}
    for release in ("debian12", "debian13"):
        base = tmp_path / "bases" / release
        (base / "etc").mkdir(parents=True)
        (base / "etc" / "os-release").write_text(f"ID=debian\nRELEASE={release}\n")
        bases[release] = str(base)
    return LabPaths("gfrel", root=str(tmp_path / "state")), bases


def test_a_node_whose_release_changes_is_reimaged_and_keeps_its_host_key(tmp_path: Path) -> None:
    paths, bases = _copy_lab(tmp_path)
    rootfs = node.prepare_rootfs(paths, "node2", bases["debian12"], "copy", "debian12")
    Path(rootfs, "etc", "written-by-a-deploy").write_text("x")
    Path(paths.node_dir("node2"), "ssh_host_ed25519_key").write_text("host key")
    # the same release again: the node's tree is kept as it is
    assert node.prepare_rootfs(paths, "node2", bases["debian12"], "copy", "debian12") == rootfs
    assert Path(rootfs, "etc", "written-by-a-deploy").exists()
    # another release: the tree is made anew from that release's base; the host key stays
    node.prepare_rootfs(paths, "node2", bases["debian13"], "copy", "debian13")
    assert Path(rootfs, "etc", "os-release").read_text() == "ID=debian\nRELEASE=debian13\n"
    assert not Path(rootfs, "etc", "written-by-a-deploy").exists()
    assert Path(paths.node_dir("node2"), "ssh_host_ed25519_key").read_text() == "host key"
    assert Path(paths.node_dir("node2"), "release").read_text() == "debian13\n"


def test_a_node_made_before_releases_counts_as_debian12(tmp_path: Path) -> None:
    paths, bases = _copy_lab(tmp_path)
    rootfs = node.prepare_rootfs(paths, "node1", bases["debian12"], "copy", "debian12")
    os.unlink(os.path.join(paths.node_dir("node1"), "release"))
    Path(rootfs, "etc", "kept").write_text("x")
    node.prepare_rootfs(paths, "node1", bases["debian12"], "copy", "debian12")
    assert Path(rootfs, "etc", "kept").exists()


def test_a_lab_saved_before_releases_loads_with_debian12(tmp_path: Path) -> None:
    saved = _state("debian12").to_dict()
    for n in saved["nodes"]:  # type: ignore[union-attr]
        n.pop("os")  # type: ignore[union-attr]
    (tmp_path / "lab.json").write_text(json.dumps(saved))
    loaded = load_state(str(tmp_path / "lab.json"))
    assert loaded is not None and loaded.nodes[0].os == "debian12"


def _fit(*releases: str) -> dict[str, Any]:
    base = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    return lab_spec_data(base, _state(*releases))


def test_the_fitted_spec_follows_the_nodes_releases() -> None:
    one = _fit("debian13", "debian13", "debian13")
    assert one["cluster"]["os"] == "debian13" and all("os" not in g for g in one["node_groups"])
    groups = _fit("debian13", "debian12", "debian12")
    assert [(g["name"], g["os"]) for g in groups["node_groups"]] == [("ctl", "debian13"), ("workers", "debian12")]
    with pytest.raises(ValueError, match=r"node group 'workers' has nodes on debian12 and debian13 \(node2=debian12"):
        _fit("debian13", "debian12", "debian13")

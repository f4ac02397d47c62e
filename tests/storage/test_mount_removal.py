"""A mount removed from the spec: gpuforge's unit is unmounted (drained nodes only) and removed, a
site's own unit and the data are never touched.

As data: the storage layer's facts in (the marked units the node has, with systemd's state), its
exact steps out (``plan_layer``). Through a real ``sh``: the read finds only marked units in a unit
directory, and the removal commands run against a stub ``systemctl`` leave the mount point's files.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from gpuforge.deploy.converge import LayerFacts, plan_layer
from gpuforge.deploy.layers.storage import mount_layer
from gpuforge.deploy.runstate import RunState
from gpuforge.deploy.storage_removal import OWNED_READ, owned_units_command, parse_owned, removal_steps
from gpuforge.render.storage import mount_unit
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.model import Spec
from tests import yaml_text

#: A compute group's CPU and memory figures (its Slurm NodeName line never has a default).
FIGURES = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000}

SITE_UNIT = "[Unit]\nDescription=the site's scratch\n[Mount]\nWhat=nas9:/x\nWhere=/site\nType=nfs\n"


def spec() -> Spec:
    data = {
        "cluster": {"name": "st", "scheduler": "slurm"},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "roles": ["controller"], "address_start": "10.9.0.11"},
            {
                "name": "cpu",
                "hosts": "cpu1",
                "roles": ["compute"],
                "address_start": "10.9.0.31",
                "hardware": FIGURES,
            },
        ],
        "storage": {
            "mounts": [{"name": "home", "path": "/home", "nodes": "ctl,cpu", "server": "10.9.0.5", "remote_path": "/h"}]
        },
        "slurm": {"accounting": {"enabled": False}, "partitions": [{"name": "b", "nodes": "cpu"}]},
    }
    return parse_spec(yaml_text.dump(data))


def node(s: Spec, name: str) -> Any:
    return next(n for n in resolve_nodes(s) if n.name == name)


def steps_for(name: str, listing: str, run: RunState) -> list[tuple[str, str | None]]:
    """The storage-mounts layer's steps on a node whose /home unit is in place and running."""
    s = spec()
    home = mount_unit(s, s.storage.mounts[0])
    layer = mount_layer(s, node(s, name), run)
    facts = LayerFacts(
        packages={"nfs-common": "1:2.6.2-4"},
        files={
            "/etc/systemd/system/home.mount": {
                "type": "file", "sha256": layer.files[0].sha256, "mode": "0644", "owner": "root", "group": "root",
            },
        },
        units={"home.mount": {"ActiveState": "active", "UnitFileState": "enabled"}},
        contents={OWNED_READ: listing},
    )  # fmt: skip
    assert layer.files[0].data.decode() == home
    steps, _ = plan_layer(layer, facts)
    return [(str(st.kind), st.command) for st in steps]


REMOVE_SCRATCH = "systemctl disable scratch.mount && rm -f /etc/systemd/system/scratch.mount"
LISTING = "home.mount active enabled\nscratch.mount active enabled\nold.mount inactive disabled\n"


def test_a_drained_compute_node_unmounts_and_removes_the_units_the_spec_dropped() -> None:
    got = steps_for("cpu1", LISTING, RunState(drained=frozenset({"cpu1"})))
    assert got == [
        ("remove", "systemctl disable old.mount && rm -f /etc/systemd/system/old.mount"),
        ("rolling", "systemctl stop scratch.mount && " + REMOVE_SCRATCH),
        ("daemon-reload", "systemctl daemon-reload"),
    ]


def test_a_compute_node_in_service_keeps_a_mounted_unit_and_is_told_why() -> None:
    got = steps_for("cpu1", LISTING, RunState())
    assert got[0] == ("remove", "systemctl disable old.mount && rm -f /etc/systemd/system/old.mount")  # unmounted
    assert got[1][0] == "warning" and got[1][1] is None
    assert got[2] == ("daemon-reload", "systemctl daemon-reload")
    assert len(got) == 3


def test_a_plan_shows_the_unmount_as_a_rolling_step() -> None:
    got = steps_for("cpu1", "scratch.mount active enabled\n", RunState(dry_run=True))
    assert [k for k, _ in got] == ["rolling", "daemon-reload"]


def test_a_node_that_runs_no_jobs_unmounts_at_once() -> None:
    got = steps_for("ctl1", "scratch.mount active enabled\n", RunState())
    assert got == [
        ("stop", "systemctl stop scratch.mount"),
        ("remove", REMOVE_SCRATCH),
        ("daemon-reload", "systemctl daemon-reload"),
    ]


def test_nothing_left_over_means_no_step() -> None:
    assert steps_for("cpu1", "home.mount active enabled\n", RunState()) == []
    assert steps_for("cpu1", "", RunState()) == []


def test_a_node_with_no_mount_left_still_removes_gpuforges_units() -> None:
    s = spec()
    without = s.model_copy(update={"storage": s.storage.model_copy(update={"mounts": []})})
    layer = mount_layer(without, node(without, "cpu1"), RunState(drained=frozenset({"cpu1"})))
    assert not layer.packages and not layer.files and not layer.services
    steps, _ = plan_layer(layer, LayerFacts(contents={OWNED_READ: "home.mount active enabled\n"}))
    assert [st.command for st in steps] == [
        "systemctl stop home.mount && systemctl disable home.mount && rm -f /etc/systemd/system/home.mount",
        "systemctl daemon-reload",
    ]


def test_listing_lines_that_are_not_unit_names_are_ignored() -> None:
    assert parse_owned("home.mount active enabled\n$(reboot).mount active\nx.service active\nsw.mount\n") == {
        "home.mount": "active",
        "sw.mount": "unknown",  # systemctl did not answer: treated as mounted
    }
    steps = removal_steps({"sw.mount": "unknown"}, set(), "cpu1", runs_jobs=True, drained=False, dry_run=False)
    assert [str(st.kind) for st in steps] == ["warning"]


# --- through a real shell --------------------------------------------------------------------------


def stub_systemctl(tmp_path: Path, active: dict[str, str]) -> tuple[dict[str, str], Path]:
    """A ``systemctl`` on PATH that logs its arguments and answers is-active/is-enabled."""
    bin_dir, log = tmp_path / "bin", tmp_path / "systemctl.log"
    bin_dir.mkdir()
    cases = "\n".join(f'  "is-active {u}") echo {s}; exit 0 ;;' for u, s in active.items())
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho "$*" >> {log}\ncase "$1 $2" in\n{cases}\n  "is-enabled "*) echo enabled ;;\n'
        '  "is-active "*) echo inactive; exit 3 ;;\nesac\nexit 0\n'
    )
    (bin_dir / "systemctl").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def sh(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, check=False)


def test_the_read_finds_gpuforges_units_only_and_the_removal_leaves_the_data(tmp_path: Path) -> None:
    s = spec()
    units = tmp_path / "units"
    units.mkdir()
    (units / "scratch.mount").write_text(mount_unit(s, s.storage.mounts[0]).replace("home", "scratch"))
    (units / "site.mount").write_text(SITE_UNIT)  # the site's own: no mark
    (units / "forged.mount").write_text("[Unit]\nDescription=gpuforge storage.mounts x: y\n")  # no header
    (units / "link.mount").symlink_to(units / "scratch.mount")  # not a file gpuforge wrote
    data = tmp_path / "scratch"
    data.mkdir()
    (data / "results.txt").write_text("keep me\n")
    env, log = stub_systemctl(tmp_path, {"scratch.mount": "active"})
    cp = sh(owned_units_command(str(units)), env)
    assert cp.returncode == 0, cp.stderr
    owned = parse_owned(cp.stdout)
    assert owned == {"scratch.mount": "active"}
    steps = removal_steps(owned, set(), "cpu1", runs_jobs=True, drained=True, dry_run=False, unit_dir=str(units))
    for step in steps:
        assert step.command is not None
        done = sh(step.command, env)
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in units.iterdir()) == ["forged.mount", "link.mount", "site.mount"]
    assert (units / "site.mount").read_text() == SITE_UNIT
    assert (data / "results.txt").read_text() == "keep me\n"
    calls = log.read_text().splitlines()
    assert [c for c in calls if not c.startswith("is-")] == [
        "stop scratch.mount",
        "disable scratch.mount",
        "daemon-reload",
    ]

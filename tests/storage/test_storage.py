"""Shared storage: the spec's rules, the exports table and mount units as rendered, the storage
layer's plan on simulated nodes, and the validator's cross-node check run through a real shell."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.layers.packages import storage_packages
from gpuforge.render import render_node
from gpuforge.render.storage import exports_path, exports_text, mount_unit, unit_name
from gpuforge.spec import SpecError, parse_spec, resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.model import Spec
from gpuforge.spec.platforms import DISTRIBUTIONS, OsFamily
from gpuforge.validator.cluster_storage import judge_mount, read_mounts
from tests import yaml_text
from tests.converge.simulated import SimulatedCluster, assert_golden_plan, simulated, write_simulated_spec

#: A compute group's CPU and memory figures (its Slurm NodeName line never has a default).
FIGURES = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000}

GOLDEN = Path(__file__).parent / "fixtures" / "plan_fresh"


def storage_data() -> dict[str, Any]:
    return {
        "cluster": {"name": "st", "scheduler": "slurm"},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl[1-2]", "roles": ["controller"], "address_start": "10.9.0.11"},
            {"name": "nas", "hosts": "nas1", "roles": ["storage"], "address_start": "10.9.0.21"},
            {"name": "cpu", "hosts": "cpu1", "roles": ["compute"], "address_start": "10.9.0.31", "hardware": FIGURES},
        ],
        "storage": {
            "exports": [{"name": "state", "path": "/export/slurm"}, {"name": "home", "path": "/export/home"}],
            "mounts": [
                {"name": "state", "path": "/shared/slurm", "nodes": "ctl", "export": "state", "timeout_s": 20},
                {"name": "home", "path": "/home", "nodes": "ctl,cpu", "export": "home"},
                {"name": "sw", "path": "/sw", "nodes": "cpu", "server": "10.9.0.99", "remote_path": "/vol/sw",
                 "writable": False, "options": ["vers=4.2", "hard"]},
            ],
        },
        "slurm": {
            "accounting": {"enabled": False},
            "state_save_location": "/shared/slurm/ctld",
            "partitions": [{"name": "b", "nodes": "cpu"}],
        },
    }  # fmt: skip


def spec_of(data: dict[str, Any]) -> Spec:
    return parse_spec(yaml_text.dump(data))


def problems(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as err:
        spec_of(data)
    return err.value.format()


# --- rendering ---------------------------------------------------------------------------------------


def test_unit_names_follow_systemds_path_escaping() -> None:
    assert unit_name("/home/lennart") == "home-lennart.mount"  # systemd.mount(5)'s example
    assert unit_name("/foo//bar/baz/") == "foo-bar-baz.mount"  # systemd.unit(5)'s example
    assert unit_name("/") == "-.mount"
    assert unit_name("/.hidden/a-b c") == "\\x2ehidden-a\\x2db\\x20c.mount"


def test_exports_table_offers_each_export_to_the_nodes_that_mount_it() -> None:
    text = exports_text(spec_of(storage_data()))
    lines = text.splitlines()
    assert (
        lines[1]
        == "/export/slurm ctl1(rw,sync,no_subtree_check,no_root_squash) ctl2(rw,sync,no_subtree_check,no_root_squash)"
    )
    assert lines[2].startswith("/export/home cpu1(") and " ctl2(" in lines[2]
    assert exports_path("/srv/a b#c") == "/srv/a\\040b\\043c"  # exports(5): backslash and three octal digits


def test_an_export_no_node_mounts_is_not_offered_to_the_world() -> None:
    data = storage_data()
    data["storage"]["exports"].append({"name": "scratch", "path": "/export/scratch"})
    text = exports_text(spec_of(data))
    assert "# scratch: no node mounts it, not exported" in text
    assert not [x for x in text.splitlines() if x.startswith("/export/scratch")]


def test_mount_units_are_nofail_with_a_timeout_and_no_node_gets_an_fstab() -> None:
    spec = spec_of(storage_data())
    state = mount_unit(spec, spec.storage.mounts[0]).splitlines()
    assert "What=nas1:/export/slurm" in state and "Where=/shared/slurm" in state and "Type=nfs" in state
    assert "Options=rw,hard,noatime,nofail" in state and "TimeoutSec=20" in state
    assert "WantedBy=remote-fs.target" in state
    sw = mount_unit(spec, spec.storage.mounts[2]).splitlines()
    assert "What=10.9.0.99:/vol/sw" in sw and "Options=ro,vers=4.2,hard,nofail" in sw
    for node in resolve_nodes(spec):
        paths = [f.path for f in render_node(spec, node)]
        assert "/etc/fstab" not in paths
    cpu = {f.path for f in render_node(spec, next(n for n in resolve_nodes(spec) if n.name == "cpu1"))}
    assert {"/etc/systemd/system/home.mount", "/etc/systemd/system/sw.mount"} <= cpu
    assert "/etc/systemd/system/shared-slurm.mount" not in cpu
    nas = {f.path for f in render_node(spec, next(n for n in resolve_nodes(spec) if n.name == "nas1"))}
    assert "/etc/exports.d/gpuforge.exports" in nas


def test_nfs_packages_per_platform_come_from_the_cited_table() -> None:
    assert DISTRIBUTIONS[OsFamily.DEBIAN12].nfs_server_packages == ("nfs-kernel-server",)
    assert DISTRIBUTIONS[OsFamily.UBUNTU2404].nfs_client_packages == ("nfs-common",)
    assert DISTRIBUTIONS[OsFamily.ROCKY9].nfs_server_packages == ("nfs-utils",)
    assert "deb-nfs" in DISTRIBUTIONS[OsFamily.DEBIAN12].sources and "el-nfs" in DISTRIBUTIONS[OsFamily.RHEL9].sources


def test_the_one_package_transaction_holds_what_every_node_of_a_group_needs_for_storage() -> None:
    """The storage node's NFS server and the NFS client of a group whose nodes all mount NFS join the
    one transaction (and so a baked image); a group where only some nodes mount keeps it per node."""
    data = storage_data()
    spec = spec_of(data)
    nodes = {n.name: n for n in resolve_nodes(spec)}
    assert storage_packages(spec, nodes["nas1"]) == ("nfs-kernel-server",)
    assert storage_packages(spec, nodes["ctl2"]) == storage_packages(spec, nodes["cpu1"]) == ("nfs-common",)
    data["node_groups"][2]["hosts"] = "cpu[1-2]"
    data["storage"]["mounts"][1]["nodes"] = "ctl,cpu1"
    data["storage"]["mounts"][2]["nodes"] = "cpu1"  # cpu2 mounts nothing
    spec = spec_of(data)
    nodes = {n.name: n for n in resolve_nodes(spec)}
    assert storage_packages(spec, nodes["cpu1"]) == storage_packages(spec, nodes["cpu2"]) == ()
    assert storage_packages(spec, nodes["ctl1"]) == ("nfs-common",)


# --- rules ---------------------------------------------------------------------------------------------


def test_storage_rules_name_the_field() -> None:
    d = storage_data()
    d["storage"]["mounts"][1]["export"] = "nope"
    assert "storage.mounts[1].export: export 'nope' is not in storage.exports (state, home)" in problems(d)
    d = storage_data()
    d["storage"]["mounts"][1]["path"] = "/etc/x"
    assert "storage.mounts[1].path: /etc/x is a system directory" in problems(d)
    d = storage_data()
    d["node_groups"][1]["roles"] = ["compute"]
    assert "storage.exports: NFS exports need exactly one node with role storage; found 0" in problems(d)
    d = storage_data()
    d["storage"]["mounts"][2]["path"] = "/home"
    assert "storage.mounts[2].path (node cpu1): cpu1 already mounts 'home' on /home" in problems(d)
    d = storage_data()
    d["storage"]["mounts"][2]["remote_path"] = None
    assert "storage.mounts[2].server: nfs mount 'sw': server and remote_path go together" in problems(d)
    d = storage_data()
    d["storage"]["mounts"][0]["nodes"] = "ctl,gpu9"
    assert "storage.mounts[0].nodes: gpu9 is not a node or node group" in problems(d)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("options", ["x-systemd.mount-timeout=5"], "ignores x-systemd"),
        ("options", ["nofail"], "sets nofail itself"),
        ("options", ["rw,exec"], "not one mount option"),
        ("path", "/shared/slurm-state", "systemd escapes"),
        ("path", "/a/../b", "a mount point here"),
    ],
)
def test_mount_values_are_typed_for_the_unit_file(field: str, value: Any, says: str) -> None:
    d = storage_data()
    d["storage"]["mounts"][0][field] = value
    assert says in problems(d)


# --- plan on simulated nodes ----------------------------------------------------------------------------


@pytest.mark.parametrize("node", ["nas1", "ctl1", "cpu1"])
def test_plan_of_fresh_nodes_is_the_golden_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str) -> None:
    from gpuforge.orchestrate.plan import plan

    cluster: SimulatedCluster = simulated(monkeypatch, tmp_path)
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    data = storage_data()
    data["time_sync"] = {"enabled": False}
    data["container_runtime"] = {"engine": "none"}
    data["ssh"] = {}
    path = write_simulated_spec(data, tmp_path, "storage.yaml")
    result = plan(load_cluster(path), limit=node)
    got = assert_golden_plan(result, node, GOLDEN)
    steps = [s for op in got["operations"] for s in op["steps"]]
    assert cluster.commands[node]
    if node == "nas1":
        assert any("nfs-kernel-server" in s.get("command", "") for s in steps)
        assert any(s["summary"] == "enable nfs-server" for s in steps)
    if node == "ctl1":
        assert any(s["summary"] == "enable shared-slurm.mount" for s in steps)


# --- the validator's cross-node check, through a real shell ---------------------------------------------


def shell_runner(tmp_path: Path, where: dict[str, Path], mounted: dict[str, dict[str, str]]) -> Any:
    """Each node's mount points live under its own directory (``where``); a stub findmnt reports
    ``mounted[node][path]``. Two nodes whose directories are one share a filesystem."""

    def run(node: Any, command: str) -> tuple[int, str, str]:
        root = where[node.name]
        bin_dir = tmp_path / f"bin-{node.name}"  # each node its own findmnt (the reads run in parallel)
        bin_dir.mkdir(exist_ok=True)
        lines = "\n".join(f'  {p}) echo "{line}"; exit 0 ;;' for p, line in mounted[node.name].items())
        (bin_dir / "findmnt").write_text(f'#!/bin/sh\ncase "$5" in\n{lines}\nesac\nexit 1\n')
        (bin_dir / "findmnt").chmod(0o755)
        for path in mounted[node.name]:
            (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        # node paths are mapped into the node's directory: /home -> <root>/home
        mapped = command
        for path in sorted(mounted[node.name], key=len, reverse=True):
            mapped = mapped.replace(f" {path}/", f" {root}{path}/").replace(f"'{path}/", f"'{root}{path}/")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
        cp = subprocess.run(["sh", "-c", mapped], capture_output=True, text=True, env=env, check=False)
        return cp.returncode, cp.stdout, cp.stderr

    return run


def test_a_file_written_on_one_node_is_read_on_the_others(tmp_path: Path) -> None:
    spec = spec_of(storage_data())
    nodes = [n for n in resolve_nodes(spec) if n.name in ("ctl1", "ctl2", "cpu1")]
    shared, apart = tmp_path / "shared", tmp_path / "apart"
    where = {"ctl1": shared, "ctl2": shared, "cpu1": apart}
    mounted = {
        "ctl1": {"/shared/slurm": "nfs4 nas1:/export/slurm rw,hard", "/home": "nfs4 nas1:/export/home rw"},
        "ctl2": {"/shared/slurm": "nfs4 nas1:/export/slurm rw,hard", "/home": "nfs4 nas1:/export/home rw"},
        "cpu1": {"/home": "nfs4 nas1:/export/home rw", "/sw": "nfs4 10.9.0.99:/vol/sw ro"},
    }

    class Data:
        pass

    data = Data()
    data.spec, data.nodes = spec, nodes  # type: ignore[attr-defined]
    got = read_mounts(data, shell_runner(tmp_path, where, mounted))  # type: ignore[arg-type]
    assert got["shared"]["state"] == {"ctl1": "", "ctl2": ""}
    # cpu1's /home is another directory: it does not see ctl1's file
    assert got["shared"]["home"]["ctl2"] == ""
    assert "does not see the file ctl1 wrote on /home" in got["shared"]["home"]["cpu1"]
    home = spec.storage.mounts[1]
    assert "does not see" in judge_mount(spec, home, got["probes"]["cpu1"]["home"], got["shared"]["home"]["cpu1"])
    assert judge_mount(spec, spec.storage.mounts[2], got["probes"]["cpu1"]["sw"], None) == ""
    assert not list(shared.rglob(".gpuforge-validate-*"))  # the token files are gone


def test_mount_judgement_names_what_is_wrong() -> None:
    spec = spec_of(storage_data())
    home, sw = spec.storage.mounts[1], spec.storage.mounts[2]
    assert judge_mount(spec, home, {"mounted": False}, None) == "/home is not mounted"
    other = {"mounted": True, "fstype": "nfs4", "source": "nas9:/x", "options": ["rw"], "writable": True}
    assert "not nas1:/export/home" in judge_mount(spec, home, other, None)
    ro = {"mounted": True, "fstype": "nfs4", "source": "nas1:/export/home", "options": ["ro"], "writable": False}
    assert "not writable (mounted ro)" in judge_mount(spec, home, ro, None)
    rw = {"mounted": True, "fstype": "nfs4", "source": "10.9.0.99:/vol/sw", "options": ["rw"], "writable": True}
    assert "declared read-only but mounted rw" in judge_mount(spec, sw, rw, None)

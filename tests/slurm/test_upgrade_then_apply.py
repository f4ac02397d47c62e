"""After ``gpuforge slurm-upgrade``, ``apply`` of the spec naming the new Slurm drains no node the
upgrade already moved; a node it did not reach (or that cannot be read) still rolls, drained.

Everything runs through a real ``sh``: the upgrade flow and the version reads against the
stand-in nodes (tests/slurm/stub_upgrade.py: ``dpkg-query``, ``apt-cache`` report what the flow
installed), the drain, wait and resume commands against the stand-in controller
(tests/converge/stub_slurm.py, a job running on a compute node). The deploys and the validator are
recorders: at the moment a node is deployed, its drain flag is read from the stand-in controller.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import remote, slurm_drain
from gpuforge.orchestrate.applied_record import last_applied, record_applied
from gpuforge.orchestrate.slurm_settled import at_spec_version, installed_command
from gpuforge.orchestrate.slurm_upgrade import UpgradeIO, plan_upgrade, run_upgrade
from gpuforge.orchestrate.slurm_upgrade_commands import UpgradePaths
from gpuforge.spec import load_spec, parse_spec
from gpuforge.spec.cluster import Cluster, load_cluster
from tests import yaml_text
from tests.converge.simulated import lock_nodes_locally
from tests.converge.stub_slurm import StubSlurm
from tests.slurm.stub_upgrade import StubCluster

OLD, NEW = "22.05.8-4", "23.02.7-1"
COMPUTE = ["cpu1", "cpu2", "cpu3"]


def spec_data(tmp: Path, slurm: str, pyxis: str = "0.24.0") -> dict[str, Any]:
    return {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "ssh": {"key": str(tmp / "id"), "known_hosts": str(tmp / "known_hosts")},
        "versions": {"slurm": slurm, "pyxis": pyxis},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "roles": ["controller", "accounting-db"]},
            {
                "name": "cpu",
                "hosts": "cpu[1-3]",
                "roles": ["compute"],
                "hardware": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000},
            },
        ],
        "rollout": {"batch_size": 2, "drain_timeout": 20},
        "slurm": {"state_save_location": str(tmp / "state"), "partitions": [{"name": "b", "nodes": "cpu"}]},
    }


class World:
    """The stand-in nodes and controller, the spec file, and what apply deployed (node, drained)."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        (tmp / "state").mkdir()
        (tmp / "id").write_text("not a key: nothing connects over SSH here\n")
        (tmp / "known_hosts").write_text("")
        units = {"ctl1": ["slurmdbd", "slurmctld"], **{n: ["slurmd"] for n in COMPUTE}}
        self.nodes = StubCluster(tmp / "nodes", units, ["ctl1"], running=OLD, repo=NEW)
        self.ctl = StubSlurm(tmp / "ctl", "ctl1", ["ctl1", *COMPUTE])
        self.spec_file = tmp / "spec.yaml"
        self.deployed: list[tuple[str, bool]] = []
        self.unreachable: set[str] = set()
        monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp / "gf-state"))
        monkeypatch.setattr(slurm_drain, "POLL_S", 0.2)
        monkeypatch.setattr(remote, "run", self.remote_run)
        monkeypatch.setattr(apply_mod, "run_deploys", self.deploy)
        monkeypatch.setattr(apply_mod, "validate_nodes", lambda spec_path, nodes: {})
        lock_nodes_locally(monkeypatch, tmp / "locks")

    def write(self, data: dict[str, Any]) -> None:
        self.spec_file.write_text(yaml_text.dump(data))

    def remote_run(
        self, cluster: Any, node: str, command: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        if node in self.unreachable:
            return subprocess.CompletedProcess(command, 255, "", "ssh: connect to host: No route to host")
        if node == "ctl1":
            return self.ctl.shell(command, timeout)  # drain, wait, resume, node states
        return self.nodes.run(node, command, timeout)

    def deploy(
        self, spec_path: Any, limit: str | None = None, on_event: Any = None, run: Any = None, locked: bool = False
    ) -> ApplyResult:
        names = (limit or "").split(",")
        self.deployed.extend((n, bool(self.ctl.node(n)["drain"])) for n in names)
        return ApplyResult({n: HostResult(n, unchanged=1) for n in names})

    def upgrade(self) -> None:
        """``gpuforge slurm-upgrade`` of the spec file, against the stand-in nodes."""
        tmp = self.tmp
        paths = UpgradePaths(
            policy_rc=str(self.nodes.policy_rc), dbd_log=str(tmp / "dbd.log"), dbd_pid=str(tmp / "dbd.pid"),
            apt_pin=str(tmp / "gpuforge-slurm.pref"),
        )  # fmt: skip
        io = UpgradeIO(run=self.nodes.run, deploy=lambda nodes: {}, say=lambda m: None, poll_s=0.2, paths=paths)
        spec = load_spec(self.spec_file)
        run_upgrade(spec, io, plan_upgrade(spec, io))
        assert not [line for line in self.nodes.log() if "ERROR" in line]
        self.nodes.calls.clear()  # what apply asks the nodes, from here

    def set_version(self, node: str, version: str) -> None:
        state = self.nodes.read()
        state["nodes"][node]["version"] = version
        self.nodes.update(nodes=state["nodes"])

    def drains(self) -> list[str]:
        return [line for line in self.ctl.log() if "State=DRAIN" in line]

    def version_reads(self) -> list[str]:
        return sorted(n for n, c in self.nodes.calls if "__installed=" in c)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    """Slurm OLD applied everywhere (recorded), a job running on cpu1, the spec edited to NEW."""
    w = World(tmp_path, monkeypatch)
    w.write(spec_data(tmp_path, OLD))
    record_applied(Cluster.of(load_spec(w.spec_file), w.spec_file))
    w.ctl.add_job(7, "cpu1", seconds=600)  # a drain of cpu1 would wait for it (and time out)
    w.write(spec_data(tmp_path, NEW))
    return w


def test_apply_after_the_upgrade_drains_no_node(world: World) -> None:
    world.upgrade()
    previews: list[apply_mod.ApplyPreview] = []

    def confirm(preview: apply_mod.ApplyPreview) -> bool:
        previews.append(preview)
        return True

    result = apply_mod.apply(load_cluster(world.spec_file), confirm=confirm)
    assert result.ok and not result.waiting, result
    assert world.drains() == []
    assert world.ctl.jobs_running("cpu1") == [7]
    assert (previews[0].rolling_fields, previews[0].to_roll) == ([], [])  # a live change now
    assert world.deployed == [(n, False) for n in ["ctl1", *COMPUTE]]  # in one run, none drained
    assert world.version_reads() == COMPUTE  # read on the nodes the field would roll
    assert last_applied(load_cluster(world.spec_file)) == load_spec(world.spec_file)


def test_a_node_the_upgrade_did_not_reach_still_rolls_drained(world: World) -> None:
    world.upgrade()
    world.set_version("cpu3", OLD)  # say the flow stopped before its batch
    result = apply_mod.apply(load_cluster(world.spec_file))
    assert result.ok and not result.waiting, result
    assert [line.split()[2] for line in world.drains()] == ["NodeName=cpu3"]
    assert ("cpu3", True) in world.deployed and ("cpu1", False) in world.deployed


def test_a_node_that_cannot_be_read_rolls_as_before(world: World) -> None:
    world.upgrade()
    world.unreachable.add("cpu2")  # its read fails; its drain goes through the controller
    apply_mod.apply(load_cluster(world.spec_file))
    assert [line.split()[2] for line in world.drains()] == ["NodeName=cpu2"]


def test_another_rolling_field_still_drains_every_node(world: World) -> None:
    world.upgrade()
    state = world.ctl.read()  # job 7 ended: the drains need not wait
    state["jobs"] = []
    world.ctl.write(state)
    world.write(spec_data(world.tmp, NEW, pyxis="0.21.0"))
    result = apply_mod.apply(load_cluster(world.spec_file))
    assert result.ok, result
    assert [line.split()[2] for line in world.drains()] == ["NodeName=cpu[1-2]", "NodeName=cpu3"]


def test_a_distro_target_compares_with_the_repositorys_candidate(world: World) -> None:
    world.write(spec_data(world.tmp, "distro"))
    world.upgrade()  # distro: the flow installs what the repository offers (NEW)
    result = apply_mod.apply(load_cluster(world.spec_file))
    assert result.ok and world.drains() == []


def test_the_read_needs_slurmd_and_every_slurm_package_at_the_version(tmp_path: Path) -> None:
    spec = parse_spec(yaml_text.dump(spec_data(tmp_path, NEW)))
    at = f"__installed=slurmd {NEW} ii\n__installed=slurm-client {NEW} ii\n"
    assert at_spec_version(spec, at) == NEW
    assert at_spec_version(spec, f"__installed=slurmd {NEW} ii\n__installed=slurm-client {OLD} ii\n") is None
    assert at_spec_version(spec, f"__installed=slurm-client {NEW} ii\n") is None  # no slurmd
    assert at_spec_version(spec, f"__installed=slurmd {NEW} rc\n") is None  # removed, config left
    assert at_spec_version(spec, "") is None
    assert "__candidate" not in installed_command(spec)
    distro = parse_spec(yaml_text.dump(spec_data(tmp_path, "distro")))
    assert at_spec_version(distro, at + f"__candidate={NEW}\n") == NEW
    assert at_spec_version(distro, at + "__candidate=(none)\n") is None
    assert at_spec_version(distro, at + "__candidate=23.02.8-1\n") is None

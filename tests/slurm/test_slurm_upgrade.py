"""The Slurm upgrade flow against stub tools run through a real shell (tests/slurm/stub_upgrade.py).

What is checked is what the stand-in cluster saw: the order of the daemons (slurmdbd, then every
slurmctld, then slurmd batch by batch), a dump that reads back whole before any package moves,
slurmdbd converting in the foreground with its progress shown and started under systemd only after,
no package upgraded without policy-rc.d, no node drained, refused jumps changing nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuforge.orchestrate.slurm_upgrade import (
    UpgradeFailed,
    UpgradeIO,
    UpgradeRefused,
    plan_upgrade,
    run_upgrade,
)
from gpuforge.orchestrate.slurm_upgrade_commands import UpgradePaths, parse_versions
from gpuforge.orchestrate.slurm_upgrade_limit import upgrade_steps
from gpuforge.spec import parse_spec
from gpuforge.spec.model import Spec
from gpuforge.spec.slurm_releases import major_of, upgrade_problem, upstream_of
from tests import yaml_text
from tests.slurm.stub_upgrade import StubCluster


def upgrade_spec(tmp: Path, version: str = "23.02.7-1") -> Spec:
    data = {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "versions": {"slurm": version},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "roles": ["controller", "accounting-db"]},
            {
                "name": "cpu",
                "hosts": "cpu[1-3]",
                "roles": ["compute"],
                "hardware": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000},
            },
        ],
        "rollout": {"batch_size": 2},
        "slurm": {"state_save_location": str(tmp / "state"), "partitions": [{"name": "b", "nodes": "cpu"}]},
    }
    return parse_spec(yaml_text.dump(data))


@pytest.fixture
def cluster(tmp_path: Path) -> StubCluster:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "job_state").write_text("jobs\n")
    nodes = {"ctl1": ["slurmdbd", "slurmctld"], "cpu1": ["slurmd"], "cpu2": ["slurmd"], "cpu3": ["slurmd"]}
    return StubCluster(tmp_path / "stub", nodes, ["ctl1"], running="22.05.8", repo="23.02.7")


def io_for(cluster: StubCluster, tmp: Path, said: list[str], deployed: list[list[str]]) -> UpgradeIO:
    paths = UpgradePaths(
        policy_rc=str(cluster.policy_rc), dbd_log=str(tmp / "dbd.log"), dbd_pid=str(tmp / "dbd.pid"),
        apt_pin=str(tmp / "gpuforge-slurm.pref"),
    )  # fmt: skip

    def deploy(nodes: list[str]) -> dict[str, str]:
        deployed.append(nodes)
        return {}

    return UpgradeIO(run=cluster.run, deploy=deploy, say=said.append, poll_s=0.2, paths=paths, stamp="20261126")


def test_versions_and_the_compatibility_window_from_schedmds_table() -> None:
    assert parse_versions("__version=slurmdbd slurm 22.05.8\n__version=sinfo slurm 23.11.4\nnoise") == {
        "slurmdbd": "22.05.8",
        "sinfo": "23.11.4",
    }
    assert parse_versions("__version=slurmd slurm-wlm 22.05.8\n") == {"slurmd": "22.05.8"}  # Debian's build
    assert major_of("1:22.05.8-4+deb12u3") == "22.05" and upstream_of("23.11.4-1.2ubuntu5") == "23.11.4"
    assert upgrade_problem("22.05.8", "23.11.4") is None  # two releases back: in the window
    assert upgrade_problem("23.02.1", "24.11.0") is None  # 24.11 reaches back three
    assert "in steps" in (upgrade_problem("22.05.8", "24.05.1") or "")  # three back before 24.11: refused
    assert "in steps" in (upgrade_problem("20.11.9", "23.11.4") or "")  # SchedMD's own example
    assert "older" in (upgrade_problem("23.02.7", "22.05.8") or "")
    assert "not in gpuforge's table" in (upgrade_problem("27.05.1", "28.05.0") or "")
    assert upgrade_problem("22.05.8", "22.05.9") is None  # maintenance release


def test_upgrade_runs_in_schedmds_order_and_keeps_jobs(tmp_path: Path, cluster: StubCluster) -> None:
    cluster.update(db_jobs=[101, 102], convert_steps=10)  # about 3 s: polled while it converts
    said: list[str] = []
    deployed: list[list[str]] = []
    spec = upgrade_spec(tmp_path)
    io = io_for(cluster, tmp_path, said, deployed)
    plan = plan_upgrade(spec, io)
    assert (plan.running, plan.target, plan.batches) == ("22.05.8", "23.02.7", [["cpu1", "cpu2"], ["cpu3"]])
    run_upgrade(spec, io, plan)
    log = cluster.log()
    assert not [line for line in log if "ERROR" in line], log
    state = cluster.read()
    assert {n: s["version"] for n, s in state["nodes"].items()} == dict.fromkeys(state["nodes"], "23.02.7")
    # slurmdbd first (converted in the foreground, then under systemd), then slurmctld, then slurmd
    # (ctl1 is also the controller: its slurmctld stops before its packages move with slurmdbd's)
    first = {key: next(i for i, line in enumerate(log) if key in line) for key in (
        "ctl1 systemctl stop slurmdbd", "ctl1 systemctl stop slurmctld", "ctl1 mysqldump", "ctl1 slurmdbd -D",
        "conversion finished", "ctl1 systemctl start slurmdbd", "ctl1 systemctl start slurmctld",
        "cpu1 systemctl stop slurmd", "cpu3 systemctl stop slurmd")}  # fmt: skip
    assert list(first.values()) == sorted(first.values()), first
    # the dump reads back whole, with the accounting rows, under the state directory
    dump = tmp_path / "state" / "gpuforge-backup" / "slurm_acct_db-22.05.8-20261126.sql"
    assert "INSERT INTO `job_table` VALUES (101);" in dump.read_text()
    assert dump.read_text().rstrip().endswith("-- Dump completed on 2026-11-26 10:00:00")
    archive = tmp_path / "state" / "gpuforge-backup" / "statesave-22.05.8-20261126.tar.gz"
    assert archive.stat().st_size > 0
    # progress of the conversion was shown, line by line from slurmdbd's log
    assert any("converting the database" in m and "converting job table" in m for m in said), said
    # nothing drained; the controller (with slurmdbd) converged once slurmctld answered, then each
    # batch converged (pyxis rebuilt there) before the next started
    assert not [c for _, c in cluster.calls if "State=DRAIN" in c]
    assert deployed == [["ctl1"], ["cpu1", "cpu2"], ["cpu3"]]
    assert not cluster.policy_rc.exists()  # removed after each install
    assert (tmp_path / "gpuforge-slurm.pref").read_text().count("Pin: version 23.02.7-1") == 1


def test_a_jump_outside_the_window_is_refused_and_changes_nothing(tmp_path: Path, cluster: StubCluster) -> None:
    said: list[str] = []
    spec = upgrade_spec(tmp_path, version="24.05.4-1")
    with pytest.raises(UpgradeRefused, match=r"24\.05 upgrades in place only from 23\.11, 23\.02"):
        plan_upgrade(spec, io_for(cluster, tmp_path, said, []))
    assert not [c for _, c in cluster.calls if "systemctl" in c or "apt-get" in c]


def test_a_distro_target_is_what_the_repository_offers(tmp_path: Path, cluster: StubCluster) -> None:
    plan = plan_upgrade(upgrade_spec(tmp_path, version="distro"), io_for(cluster, tmp_path, [], []))
    assert plan.target == "23.02.7"


def test_nodes_on_different_versions_are_refused(tmp_path: Path, cluster: StubCluster) -> None:
    state = cluster.read()
    state["nodes"]["cpu2"]["version"] = "23.02.7"
    cluster.update(nodes=state["nodes"])
    with pytest.raises(UpgradeRefused, match="different Slurm versions"):
        plan_upgrade(upgrade_spec(tmp_path), io_for(cluster, tmp_path, [], []))


def test_a_failed_conversion_stops_before_slurmctld_and_names_the_dump(tmp_path: Path, cluster: StubCluster) -> None:
    cluster.update(convert_fails=True)
    spec = upgrade_spec(tmp_path)
    io = io_for(cluster, tmp_path, [], [])
    with pytest.raises(UpgradeFailed) as err:
        run_upgrade(spec, io, plan_upgrade(spec, io))
    assert "exited during its database conversion" in str(err.value)
    assert "slurm_acct_db-22.05.8-20261126.sql" in str(err.value)
    assert "slurmctld on ctl1 stopped" in str(err.value)  # said, since it stays down
    log = cluster.log()
    reads = (" -V", "cpu1 dpkg-query", "cpu2 dpkg-query", "cpu3 dpkg-query")
    touched = [x for x in log if "systemctl start slurmctld" in x or (x.startswith("cpu") and not any(
        r in x for r in reads))]  # fmt: skip
    assert not touched  # only the versions (daemons' and packages') were read on the compute nodes
    assert cluster.read()["nodes"]["cpu1"]["version"] == "22.05.8"


def test_a_dump_cut_short_stops_the_upgrade_before_any_package(tmp_path: Path, cluster: StubCluster) -> None:
    cluster.update(truncate_dump=True)
    spec = upgrade_spec(tmp_path)
    io = io_for(cluster, tmp_path, [], [])
    with pytest.raises(UpgradeFailed, match="cut short"):
        run_upgrade(spec, io, plan_upgrade(spec, io))
    assert not [line for line in cluster.log() if "apt-get install" in line]


def test_what_is_left_to_upgrade_is_read_by_package_version(tmp_path: Path, cluster: StubCluster) -> None:
    """Another build of the running release (a Debian security update) is an upgrade; nodes that
    have the target build already are not pending."""
    state = cluster.read()
    for node in state["nodes"].values():
        node["version"] = "22.05.8-4+deb12u2"
    state["nodes"]["cpu3"]["version"] = "22.05.8-4+deb12u3"
    cluster.update(nodes=state["nodes"], repo="22.05.8-4+deb12u3")
    io = io_for(cluster, tmp_path, [], [])
    plan = plan_upgrade(upgrade_spec(tmp_path, version="22.05.8-4+deb12u3"), io)
    assert (plan.running, plan.target, plan.package) == ("22.05.8", "22.05.8", "22.05.8-4+deb12u3")
    assert plan.pending == ["ctl1", "cpu1", "cpu2"]
    cluster.update(nodes={n: {**s, "version": "22.05.8-4+deb12u3"} for n, s in state["nodes"].items()})
    assert plan_upgrade(upgrade_spec(tmp_path, version="distro"), io).pending == []  # the candidate, everywhere


def build_spec(tmp: Path) -> Spec:
    """The upgrade spec with Slurm built by gpuforge (``slurm.source: build``, the operator's digest)."""
    d = yaml.safe_load(yaml_text.dump(upgrade_spec(tmp).model_dump(mode="json", exclude_none=True)))
    d["slurm"]["source"] = "build"
    d["slurm"]["build"] = {"tarball": "https://192.0.2.1/slurm-23.02.7.tar.gz", "sha256": "ab" * 32, "hosts": ["ctl1"]}
    return parse_spec(yaml_text.dump(d))


def schedmd_names(cluster: StubCluster) -> None:
    """The stand-in nodes carry SchedMD's package names (what gpuforge's build installs)."""
    state = cluster.read()
    for node in state["nodes"].values():
        node["packages"] = [p.replace("slurm-client", "slurm-smd-client") for p in node["packages"]]
        node["packages"] = [p if p.startswith("slurm-smd") else f"slurm-smd-{p}" for p in node["packages"]]
    cluster.update(nodes=state["nodes"])


def test_a_built_slurm_is_put_in_every_nodes_apt_sources_before_any_daemon_stops(
    tmp_path: Path, cluster: StubCluster
) -> None:
    schedmd_names(cluster)
    spec = build_spec(tmp_path)
    said: list[str] = []
    io = io_for(cluster, tmp_path, said, [])
    published: list[tuple[list[str], int]] = []
    io.publish = lambda nodes: published.append((nodes, len(cluster.log()))) or {}
    plan = plan_upgrade(spec, io)
    assert plan.publish and plan.pending == ["ctl1", "cpu1", "cpu2", "cpu3"]
    steps = upgrade_steps(plan, "slurm_acct_db")
    assert (
        steps[0] == "1. cpu[1-3],ctl1: put gpuforge's build of Slurm 23.02.7-1 in the apt sources (installs "
        "nothing, stops nothing)"
    )
    read = len(cluster.log())  # the plan's reads of versions
    run_upgrade(spec, io, plan)
    assert published == [(["ctl1", "cpu1", "cpu2", "cpu3"], read)], "once, before anything else ran on the nodes"
    assert "ctl1 systemctl stop slurmdbd" in cluster.log()[read]
    assert {n: s["version"] for n, s in cluster.read()["nodes"].items()} == dict.fromkeys(
        ["ctl1", "cpu1", "cpu2", "cpu3"], "23.02.7"
    )
    assert plan.done[0] == "gpuforge's build of Slurm 23.02.7-1 in the apt sources of ctl1, cpu1, cpu2, cpu3"


def test_a_build_that_cannot_be_published_stops_nothing(tmp_path: Path, cluster: StubCluster) -> None:
    schedmd_names(cluster)
    spec = build_spec(tmp_path)
    io = io_for(cluster, tmp_path, [], [])
    io.publish = lambda nodes: {"cpu2": "publishing gpuforge's Slurm build failed (exit 1): disk full"}
    plan = plan_upgrade(spec, io)
    with pytest.raises(UpgradeFailed) as e:
        run_upgrade(spec, io, plan)
    assert "cpu2: publishing gpuforge's Slurm build failed (exit 1): disk full; no daemon was stopped" in str(e.value)
    assert "Done before it: nothing" in str(e.value)
    assert not [c for _, c in cluster.calls if "systemctl stop" in c or "apt-get install" in c]

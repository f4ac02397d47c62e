"""Slurm HA in the spec, slurm.conf and the validator: shared state, SlurmctldHost order, timeouts,
``scontrol ping`` read as Slurm prints it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.slurm_changes import SlurmAction, classify
from gpuforge.render.slurm import slurm_conf
from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.slurm_ha import SOURCES, parse_ping, slurm_path
from gpuforge.validator.cluster_ha import judge_controller, read_ping
from gpuforge.validator.node.base import FAIL, PASS
from tests import yaml_text

#: scontrol ping as src/scontrol/scontrol.c prints it (root sees the banner when one is down).
PING_DOWN = """Slurmctld(primary) at ctl1 is DOWN
Slurmctld(backup) at ctl2 is UP
*****************************************
** RESTORE SLURMCTLD DAEMON TO SERVICE **
*****************************************
"""


def ha_data(state: str = "/shared/slurm/ctld", mount_nodes: str = "ctl", writable: bool = True) -> dict[str, Any]:
    return {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl[1-2]", "roles": ["controller"]},
            {
                "name": "cpu",
                "hosts": "cpu[1-2]",
                "roles": ["compute"],
                "hardware": {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000},
            },
        ],
        "storage": {
            "mounts": [
                {"name": "state", "path": "/shared", "nodes": mount_nodes, "kind": "external", "writable": writable}
            ]
        },
        "slurm": {
            "accounting": {"enabled": False},
            "state_save_location": state,
            "failover": {"slurmctld_timeout": 15, "slurmd_timeout": 600},
            "partitions": [{"name": "b", "nodes": "cpu"}],
        },
    }


def test_ping_lines_are_read_in_slurm_conf_order_and_the_banner_skipped() -> None:
    assert parse_ping(PING_DOWN) == [("primary", "ctl1", False), ("backup", "ctl2", True)]
    assert parse_ping("Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup2) at c3 is UP\n")[1] == (
        "backup2",
        "c3",
        True,
    )
    assert parse_ping("scontrol: error: slurm_ping: Unable to contact slurm controller\n") == []
    assert "Slurmctld(%s) at %s is %s" in SOURCES["scontrol-ping"].section


def test_each_controller_row_says_its_place_and_whether_it_answers() -> None:
    up = [("primary", "ctl1", True), ("backup", "ctl2", True)]
    assert judge_controller(["ctl1", "ctl2"], up, "ctl2") == (PASS, "backup, answers (primary ctl1 UP, backup ctl2 UP)")
    status, why = judge_controller(["ctl1", "ctl2"], parse_ping(PING_DOWN), "ctl1")
    assert status == FAIL and "backup ctl2 is in control" in why
    status, why = judge_controller(["ctl1", "ctl2"], [("primary", "ctl2", True), ("backup", "ctl1", True)], "ctl1")
    assert status == FAIL and "the spec's ctl1, ctl2" in why


def test_read_ping_runs_scontrol_ping_through_a_shell_on_the_first_controller_that_answers(tmp_path: Path) -> None:
    stub = tmp_path / "scontrol"
    stub.write_text(f"#!{sys.executable}\nimport sys\nprint({PING_DOWN!r}, end='')\nsys.exit(0)\n")
    stub.chmod(0o755)
    spec = parse_spec(yaml_text.dump(ha_data()))
    seen = []

    def run(node: Any, command: str) -> tuple[int, str, str]:
        seen.append(node.name)
        if node.name == "ctl1":
            return 255, "", "ssh: connect to host ctl1 port 22: Connection refused"
        env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
        cp = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)
        return cp.returncode, cp.stdout, cp.stderr

    class Data:
        pass

    data = Data()
    data.spec = spec  # type: ignore[attr-defined]
    got = read_ping(data, run)  # type: ignore[arg-type]
    assert seen == ["ctl1", "ctl2"] and got["from"] == "ctl2" and got["error"] is None
    assert got["pings"] == [("primary", "ctl1", False), ("backup", "ctl2", True)]


def test_two_controllers_need_their_state_on_a_mount_both_share() -> None:
    parse_spec(yaml_text.dump(ha_data()))  # an external shared mount on both: accepted
    for bad in (ha_data(state="/var/lib/slurm/slurmctld"), ha_data(mount_nodes="ctl1"), ha_data(writable=False)):
        with pytest.raises(SpecError) as err:
            parse_spec(yaml_text.dump(bad))
        assert "slurm.state_save_location: two controllers (ctl1, ctl2) share Slurm's state" in err.value.format()


def test_gpuforge_check_exits_2_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "ha.yaml"
    path.write_text(yaml_text.dump(ha_data(state="/var/lib/slurm/slurmctld")))
    cp = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(path)], capture_output=True, text=True)
    assert cp.returncode == 2
    assert "slurm.state_save_location: two controllers" in cp.stderr and "Traceback" not in cp.stderr


@pytest.mark.parametrize("bad", ["relative/dir", "/", "/a//b", "/a/../b", "/a/b/", "/a b", "/a#b", '/a"b', "/a\\b"])
def test_state_dir_is_a_plain_absolute_path(bad: str) -> None:
    with pytest.raises(ValueError):
        slurm_path(bad)


def test_slurm_conf_has_both_controllers_in_order_the_shared_state_and_the_timeouts() -> None:
    conf = slurm_conf(parse_spec(yaml_text.dump(ha_data())))
    lines = conf.splitlines()
    assert [x for x in lines if x.startswith("SlurmctldHost=")] == ["SlurmctldHost=ctl1", "SlurmctldHost=ctl2"]
    assert "StateSaveLocation=/shared/slurm/ctld" in lines
    assert "SlurmctldTimeout=15" in lines and "SlurmdTimeout=600" in lines


def test_timeouts_reconfigure_and_controller_order_restarts() -> None:
    data = ha_data()
    old = slurm_conf(parse_spec(yaml_text.dump(data)))
    data["slurm"]["failover"]["slurmctld_timeout"] = 30
    assert classify(old, slurm_conf(parse_spec(yaml_text.dump(data))))[0] is SlurmAction.RECONFIGURE
    data["node_groups"][0]["hosts"] = "ctl2,ctl1"
    assert classify(old, slurm_conf(parse_spec(yaml_text.dump(data))))[0] is SlurmAction.RESTART


def test_extra_config_cannot_set_what_the_ha_fields_render() -> None:
    for key in ("StateSaveLocation", "SlurmctldTimeout", "slurmdtimeout"):
        data = ha_data()
        data["slurm"]["extra_config"] = {key: "/tmp"}
        with pytest.raises(SpecError, match="rendered from the spec"):
            parse_spec(yaml_text.dump(data))

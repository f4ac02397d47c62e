"""sacctmgr planning: read state in, only the differing commands out."""

from __future__ import annotations

from typing import Any

from gpuforge.deploy.operations.slurm_accounting import minutes, plan_accounting
from gpuforge.probes.slurm import SacctmgrInfo
from gpuforge.spec import load_spec

SPEC = load_spec("inventories/lab.yaml")


def info(qos: list[dict[str, str]], account: list[dict[str, str]], assoc: list[dict[str, str]]) -> SacctmgrInfo:
    return SacctmgrInfo(available=True, error=None, rc={}, messages=[], qos=qos, account=account, assoc=assoc)


def converged() -> dict[str, Any]:
    qos = [
        {
            "Name": "normal",
            "Priority": "0",
            "Preempt": "",
            "PreemptMode": "cluster",
            "GrpTRES": "",
            "MaxTRESPerUser": "",
        },
        {"Name": "low", "Priority": "10", "Preempt": "", "PreemptMode": "cluster", "GrpTRES": "", "MaxTRESPerUser": ""},
        {
            "Name": "high",
            "Priority": "1000",
            "Preempt": "low",
            "PreemptMode": "requeue",
            "GrpTRES": "",
            "MaxTRESPerUser": "",
        },
    ]
    account = [{"Account": "root"}, {"Account": "research"}, {"Account": "ops"}]
    row = {"Cluster": "gflab", "DefaultQOS": ""}
    assoc = [
        {**row, "Account": "root", "User": "", "Share": "1", "QOS": "normal"},
        {**row, "Account": "research", "User": "", "Share": "10", "QOS": "low,normal", "DefaultQOS": "normal"},
        {**row, "Account": "research", "User": "alice", "Share": "1", "QOS": "low,normal"},
        {**row, "Account": "research", "User": "bob", "Share": "1", "QOS": "low,normal"},
        {**row, "Account": "ops", "User": "", "Share": "5", "QOS": "high,normal"},
        {**row, "Account": "ops", "User": "carol", "Share": "1", "QOS": "high,normal"},
    ]
    return {"qos": qos, "account": account, "assoc": assoc}


def test_empty_database_gets_everything() -> None:
    steps = plan_accounting(SPEC, info([], [], []))
    cmds = [s.command for s in steps]
    assert cmds[0] == "sacctmgr -i add cluster gflab"
    assert "sacctmgr -i add qos low" in cmds and "sacctmgr -i add qos high" in cmds
    assert cmds.index("sacctmgr -i add qos low") < next(
        i for i, c in enumerate(cmds) if "modify qos where name=high" in c
    )
    high = next(c for c in cmds if c and "modify qos where name=high" in c)
    assert "Preempt=low" in high and "PreemptMode=requeue" in high and "Priority=1000" in high
    assert any(c and c.startswith("sacctmgr -i add account research parent=root fairshare=10") for c in cmds)
    assert "sacctmgr -i add user alice account=research cluster=gflab" in cmds


def test_converged_database_is_a_noop() -> None:
    assert plan_accounting(SPEC, info(**converged())) == []


def test_only_differences_are_changed() -> None:
    state = converged()
    state["qos"][2]["Priority"] = "500"
    state["assoc"] = [a for a in state["assoc"] if a["User"] != "bob"]
    state["assoc"].append(
        {"Cluster": "gflab", "Account": "ops", "User": "mallory", "Share": "1", "QOS": "normal", "DefaultQOS": ""}
    )
    cmds = [s.command for s in plan_accounting(SPEC, info(**state))]
    assert cmds == [
        "sacctmgr -i modify qos where name=high set Priority=1000",
        "sacctmgr -i add user bob account=research cluster=gflab",
        "sacctmgr -i delete user where name=mallory account=ops cluster=gflab",
    ]


def test_slurm_times_to_minutes() -> None:
    assert minutes("30") == 30
    assert minutes("1:00:00") == 60
    assert minutes("2-00:00:00") == 2880
    assert minutes("UNLIMITED") is None


def test_steps_run_as_one_sacctmgr_process() -> None:
    from gpuforge.deploy.operations.slurm_accounting import batch_command

    steps = plan_accounting(SPEC, info([], [], []))
    cmd = batch_command(steps)
    assert cmd.endswith("| sacctmgr -i") and cmd.count("sacctmgr") == 1
    assert "add cluster gflab\\nadd qos low\\n" in cmd or "add cluster gflab\nadd qos low\n" in cmd


def test_a_run_interrupted_after_slurmdbd_conf_makes_the_database_again() -> None:
    """Issue 30's half-finished run: slurmdbd.conf was written (its restart recorded as pending on
    the node first), then the run died before the database step. The re-run finds the file as
    wanted, yet makes the database and user again, before the owed restart."""
    from gpuforge.deploy.converge import LayerFacts, plan_layer, sha256
    from gpuforge.deploy.layers.slurm import SLURMDBD_CONF, accounting_layer
    from gpuforge.render.files import Secrets

    layer = accounting_layer(load_spec("inventories/lab.yaml"), Secrets.redacted())
    conf = next(f for f in layer.files if f.path == SLURMDBD_CONF)
    have = {"sha256": sha256(conf.data), "mode": conf.mode, "owner": conf.owner, "group": conf.group, "type": "file"}
    packages = dict.fromkeys(layer.packages, "1")
    running = {"ActiveState": "active", "UnitFileState": "enabled"}
    units = {"mariadb": running, "slurmdbd": running}
    log_dir = {"/var/log/slurm": {"type": "directory", "mode": "0755", "owner": "slurm", "group": "slurm"}}

    def kinds(pending: set[str]) -> list[str]:
        facts = LayerFacts(packages=packages, files={SLURMDBD_CONF: have, **log_dir}, units=units, pending=pending)
        return [s.kind for s in plan_layer(layer, facts)[0] if s.kind != "verify"]

    assert kinds({"slurmdbd.restart"})[:2] == ["database", "restart"]
    assert "database" not in kinds(set())  # nothing owed: the database is not touched

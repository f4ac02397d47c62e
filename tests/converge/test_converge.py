"""The layer planner as data: desired layer + host facts in, steps out (pyinfra-style)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuforge.deploy.apt import DPKG_INTERRUPTED, REPAIR, install_command
from gpuforge.deploy.converge import (
    Account,
    Directory,
    Layer,
    LayerFacts,
    Service,
    plan_layer,
    repair_steps,
    service_steps,
    sha256,
    upload_commands,
)
from gpuforge.deploy.facts.layer import layer_state_command, parse_layer_state
from gpuforge.render.files import RenderedFile

FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.json"))


def build_layer(d: dict[str, Any]) -> Layer:
    return Layer(
        d["name"],
        packages=tuple(d.get("packages", ())),
        accounts=tuple(Account(**a) for a in d.get("accounts", ())),
        directories=tuple(Directory(**x) for x in d.get("directories", ())),
        files=[RenderedFile(**f) for f in d.get("files", ())],
        hold_pins=d.get("hold_pins", False),
        services=tuple(
            Service(
                s["unit"],
                enabled=s.get("enabled", True),
                running=s.get("running", True),
                restart_on=tuple(s.get("restart_on", ())),
                reload_on=tuple(s.get("reload_on", ())),
                reload_command=s.get("reload_command"),
            )
            for s in d.get("services", ())
        ),
    )


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_plan_layer(path: Path) -> None:
    case = json.loads(path.read_text())
    facts = LayerFacts(**case["facts"])
    steps, changed = plan_layer(build_layer(case["layer"]), facts)
    assert [[s.kind, s.summary] for s in steps] == case["steps"]
    assert sorted(changed) == sorted(case["changed"])
    if "commands" in case:
        assert [s.command for s in steps] == case["commands"]


def test_secret_content_never_in_steps() -> None:
    layer = build_layer(
        {"name": "m", "files": [{"path": "/etc/munge/munge.key", "content": "TOPSECRET", "secret": True}]}
    )
    steps, _ = plan_layer(layer, LayerFacts())
    text = json.dumps([s.as_dict() for s in steps])
    assert "TOPSECRET" not in text
    assert steps[0].upload is not None and steps[0].upload.data == b"TOPSECRET"


def test_upload_goes_through_private_staging_then_install_with_mode() -> None:
    staged, cmd = upload_commands(RenderedFile("/etc/munge/munge.key", b"k", mode="0400", owner="munge", group="munge"))
    assert staged.startswith("/var/lib/gpuforge/staging/")
    assert cmd == (
        f"install -D -m 0400 -o munge -g munge {staged} /etc/munge/munge.key.gpuforge-new && "
        f"mv -fT /etc/munge/munge.key.gpuforge-new /etc/munge/munge.key && rm -f {staged}"
    )


def test_upload_replaces_the_file_atomically_for_real(tmp_path: Path) -> None:
    """Run the install command: a reader holding the old file keeps it whole; the new one appears whole."""
    import getpass
    import grp
    import os
    import subprocess

    dest = tmp_path / "etc" / "x.conf"
    dest.parent.mkdir()
    dest.write_text("old\n")
    with dest.open() as reader:
        user, group = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name
        staged, cmd = upload_commands(RenderedFile(str(dest), b"new\n", mode="0640", owner=user, group=group))
        staging = tmp_path / "staging"
        staging.mkdir()
        local = str(staging / "f")
        (staging / "f").write_bytes(b"new\n")
        subprocess.run(["sh", "-c", cmd.replace(staged, local)], check=True)
        assert reader.read() == "old\n"  # the old inode was replaced, not rewritten
    assert dest.read_text() == "new\n" and oct(dest.stat().st_mode & 0o777) == "0o640"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["x.conf"] and not (staging / "f").exists()


def test_install_step_is_the_apt_install_command_for_missing_packages_only() -> None:
    steps, _ = plan_layer(Layer("p", packages=("slurmd", "munge")), LayerFacts(packages={"munge": "1"}))
    want = [("install", "install slurmd", install_command(["slurmd"]))]
    assert [(s.kind, s.summary, s.command) for s in steps] == want


def test_interrupted_dpkg_is_repaired_as_its_own_step() -> None:
    repair = "repair an interrupted package run (dpkg --configure -a)"
    assert [(s.kind, s.summary, s.command) for s in repair_steps(LayerFacts(dpkg_interrupted=True))] == [
        ("repair", repair, REPAIR)
    ]
    assert repair_steps(LayerFacts(packages={"munge": "1"})) == []
    # The install itself starts with the same repair (idempotent), for layers that install later.
    assert install_command(["munge"]).startswith(REPAIR + " && ")


def test_layer_state_round_trip() -> None:
    """One command for a whole layer, and its output parsed back into LayerFacts."""
    cmd = layer_state_command(["munge"], ["/etc/munge/munge.key"], ["munge"], ["munge"], ["/etc/slurm/slurm.conf"])
    for part in ("dpkg-query", "sha256sum", "systemctl show", "id -u munge", "base64 -w0 /etc/slurm/slurm.conf"):
        assert part in cmd
    output = [
        "__section=packages",
        "__query=munge",
        "munge\t0.5.15-2\tii ",
        "__section=files",
        "__file=/etc/munge/munge.key",
        "__stat=400|munge|munge|regular file|1024",
        "__sha256=ab" * 1,
        "__section=units",
        "__units=munge",
        "Id=munge.service",
        "LoadState=loaded",
        "ActiveState=active",
        "SubState=running",
        "UnitFileState=enabled",
        "MainPID=77",
        "",
        "__rc=0",
        "__section=accounts",
        "munge=64030",
        "__section=contents",
        "/etc/slurm/slurm.conf=Q2x1c3Rlck5hbWU9eAo=",
    ]
    facts = parse_layer_state(output)
    assert facts.packages == {"munge": "0.5.15-2"}
    assert facts.files["/etc/munge/munge.key"] == {
        "sha256": "ab",
        "mode": "0400",
        "owner": "munge",
        "group": "munge",
        "type": "file",
        "size": 1024,
    }
    unit = facts.units["munge"]
    assert unit is not None and unit["MainPID"] == 77 and unit["ActiveState"] == "active"
    assert facts.accounts == {"munge": 64030}
    assert facts.contents == {"/etc/slurm/slurm.conf": "ClusterName=x\n"}
    assert facts.dpkg_interrupted is False


def test_layer_state_reads_an_interrupted_dpkg() -> None:
    cmd = layer_state_command(["munge"], [], [], [], [])
    assert "__section=dpkg" in cmd and f"if {DPKG_INTERRUPTED}; then echo interrupted; fi" in cmd
    out = ["__section=packages", "__query=munge", "munge\t0.5.15-2\tiF ", "__section=dpkg", "interrupted"]
    facts = parse_layer_state(out)
    assert facts.dpkg_interrupted is True and facts.packages == {"munge": None}  # half-configured is not installed
    assert parse_layer_state(["__section=dpkg"]).dpkg_interrupted is False
    assert "__section=dpkg" not in layer_state_command([], ["/etc/x"], [], [], [])  # no packages, no dpkg probe


KEY = RenderedFile("/etc/munge/munge.key", b"k", mode="0400", owner="munge", group="munge", secret=True)
ACTIVE = {"ActiveState": "active", "UnitFileState": "enabled"}
CLEAR_MUNGE = (
    " && rm -f /var/lib/gpuforge/pending/munge.restart /var/lib/gpuforge/pending/munge.reload"
    " /var/lib/gpuforge/pending/munge.reconfigure"
)


def _munge_layer() -> Layer:
    return Layer("munge", files=[KEY], services=(Service("munge", restart_on=(KEY.path,)),))


def _facts(key_sha: str, pending: set[str]) -> LayerFacts:
    have = {"sha256": key_sha, "mode": "0400", "owner": "munge", "group": "munge", "type": "file"}
    return LayerFacts(files={KEY.path: have}, units={"munge": ACTIVE}, pending=pending)


def test_a_restart_is_recorded_on_the_node_before_the_file_is_written() -> None:
    steps, _ = plan_layer(_munge_layer(), _facts("old", set()))
    assert [(s.kind, s.command) for s in steps] == [
        ("pending", "install -d -m 0700 /var/lib/gpuforge/pending && touch /var/lib/gpuforge/pending/munge.restart"),
        ("upload", None),
        ("restart", "systemctl restart munge" + CLEAR_MUNGE),
    ]


def test_a_restart_owed_by_an_interrupted_run_is_made_although_the_files_match() -> None:
    """The run wrote munge.key and died before the restart: the re-run sees matching files and the marker."""
    steps, _ = plan_layer(_munge_layer(), _facts(sha256(KEY.data), {"munge.restart"}))
    assert [(s.kind, s.summary, s.command) for s in steps] == [
        ("restart", "restart munge (a restart is pending on the node)", "systemctl restart munge" + CLEAR_MUNGE)
    ]
    assert plan_layer(_munge_layer(), _facts(sha256(KEY.data), set()))[0] == []  # paid: nothing owed


def test_an_owed_reload_uses_the_services_reload_command() -> None:
    yml = "/etc/prometheus/prometheus.yml"
    prom = Service("prometheus", reload_on=(yml,), reload_command="systemctl reload prometheus")
    facts = LayerFacts(units={"prometheus": ACTIVE}, pending={"prometheus.reload", "munge.restart"})
    steps = service_steps((prom,), facts, set())
    assert [(s.kind, s.command) for s in steps] == [
        ("reload", "systemctl reload prometheus && rm -f /var/lib/gpuforge/pending/prometheus.restart "
         "/var/lib/gpuforge/pending/prometheus.reload /var/lib/gpuforge/pending/prometheus.reconfigure"),
    ]  # fmt: skip


def test_a_stopped_service_forgets_what_it_was_owed() -> None:
    svc = Service("nvidia-dcgm", running=False)
    facts = LayerFacts(units={"nvidia-dcgm": {"ActiveState": "inactive"}}, pending={"nvidia-dcgm.restart"})
    steps = service_steps((svc,), facts, set())
    assert [s.kind for s in steps] == ["enable", "pending"]
    assert (
        steps[1].command == "rm -f /var/lib/gpuforge/pending/nvidia-dcgm.restart "
        "/var/lib/gpuforge/pending/nvidia-dcgm.reload /var/lib/gpuforge/pending/nvidia-dcgm.reconfigure"
    )


def test_layer_state_reads_pending_markers() -> None:
    cmd = layer_state_command([], [], ["munge"], [], [])
    assert "__section=pending" in cmd and "ls -1 /var/lib/gpuforge/pending" in cmd
    facts = parse_layer_state(["__section=pending", "munge.restart", "slurmctld.reconfigure"])
    assert facts.pending == {"munge.restart", "slurmctld.reconfigure"}


def test_an_owed_restart_after_a_unit_file_written_without_the_reload_reloads_first() -> None:
    """Issue 30's half-finished run: dcgm-exporter's unit was written, the run died before
    ``daemon-reload`` and the restart. The re-run finds the files as wanted, the restart owed, and
    systemd saying the unit changed on disk (NeedDaemonReload=yes): it reloads, then restarts."""
    unit = RenderedFile("/etc/systemd/system/dcgm-exporter.service", b"[Service]\nExecStart=/usr/bin/x\n")
    layer = Layer("nvidia-dcgm", files=[unit], services=(Service("dcgm-exporter", restart_on=(unit.path,)),))
    have = {"sha256": sha256(unit.data), "mode": "0644", "owner": "root", "group": "root", "type": "file"}
    stale = {**ACTIVE, "NeedDaemonReload": True}
    facts = LayerFacts(files={unit.path: have}, units={"dcgm-exporter": stale}, pending={"dcgm-exporter.restart"})
    steps, _ = plan_layer(layer, facts)
    assert [(s.kind, s.command) for s in steps][:2] == [
        ("daemon-reload", "systemctl daemon-reload"),
        ("restart", "systemctl restart dcgm-exporter" + CLEAR_MUNGE.replace("munge", "dcgm-exporter")),
    ]
    assert "dcgm-exporter changed on disk since systemd loaded it" in steps[0].summary
    loaded = LayerFacts(files={unit.path: have}, units={"dcgm-exporter": ACTIVE}, pending=set())
    assert plan_layer(layer, loaded)[0] == []  # loaded and nothing owed: nothing to do


def test_need_daemon_reload_is_read_from_systemctl_show() -> None:
    from gpuforge.probes.systemd import parse_systemctl_show

    lines = ["__units=a.service b.service", "Id=a.service", "NeedDaemonReload=yes", "", "Id=b.service",
             "NeedDaemonReload=no", "", "__rc=0"]  # fmt: skip
    units = parse_systemctl_show(lines)["units"]
    assert units["a.service"] is not None and units["a.service"]["NeedDaemonReload"] is True
    assert units["b.service"] is not None and units["b.service"]["NeedDaemonReload"] is False

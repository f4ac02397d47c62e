"""scheduler.slurm_version: the versions a node reports (recorded in SchedMD's cited formats) against the
version the spec implies, and the rendered slurm.conf against the running release's parameter table."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuforge.probes.slurm_version import SLURM_VERSION, slurm_version_command
from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.validator import cluster_slurm_version as sv
from gpuforge.validator.cluster import ClusterData
from gpuforge.validator.node.base import FAIL, PASS
from gpuforge.validator.registry import BY_ID, resolve
from gpuforge.validator.runner import validate

from .vhelpers import FakeCluster, fixture, lab_spec, node, slurm_version_lines

DEB12 = "the Debian 12 (bookworm) archive, 22.05.8-4+deb12u3"


def pinned(version: str, source: str = "site", **slurm: Any) -> Any:
    """A change of the lab spec: ``versions.slurm`` pinned, ``slurm.source`` and more ``slurm`` keys."""

    def mutate(data: dict[str, Any]) -> None:
        data["versions"]["slurm"] = version
        data["slurm"].update(source=source, **slurm)

    return mutate


def judged(tmp_path: Path, lines: list[str], name: str = "node2", mutate: Any = None) -> tuple[str, str]:
    """The check's row for ``name`` of the lab spec (changed by ``mutate``) whose probe printed ``lines``."""
    spec, path = lab_spec(tmp_path, mutate)
    data = ClusterData(spec, path, resolve_nodes(spec))
    data.node_data[name] = {"slurm_version": dict(SLURM_VERSION.parse(lines))}
    return sv.slurm_version(data, node(spec, name))


def lines_of(tmp_path: Path, name: str, version: str, running: str | None = None, mutate: Any = None) -> list[str]:
    spec, _ = lab_spec(tmp_path, mutate)
    return slurm_version_lines(node(spec, name), version, running)


# --------------------------------------------------------------------------- the probe, through a real shell

SCONTROL = """#!/bin/sh
case "$2" in
slurmd) printf 'Active Steps             = NONE\\nSlurmd PID               = 812\\n'
        printf 'Version                  = %s\\n' "$RUNNING";;
config) printf 'Configuration data as of 2026-11-30T00:10:00\\nSLURM_CONF              = /etc/slurm/slurm.conf\\n'
        printf 'SLURM_VERSION           = %s\\nSrunEpilog              = (null)\\n\\n' "$RUNNING"
        printf 'Slurmctld(primary) at ctl1 is UP\\nSlurmctld(backup) at ctl2 is UP\\n';;
esac
"""


@pytest.mark.parametrize(
    ("package_name", "installed", "running"),
    [("slurm-wlm", "22.05.8", "22.05.8"), ("slurm", "24.11.5", "24.11.4"), ("slurm", "26.05.3", "26.05.3")],
)
def test_the_probe_reads_each_binary_and_what_the_daemons_report(
    tmp_path: Path, package_name: str, installed: str, running: str
) -> None:
    """Stub binaries print the cited formats (``slurm 24.11.5``; scontrol's padded ``Version  = `` and
    ``SLURM_VERSION = `` lines and the ping lines); the command runs in a real shell."""
    for binary in ("sinfo", "slurmd", "slurmctld"):
        (tmp_path / binary).write_text(f"#!/bin/sh\necho '{package_name} {installed}'\n")
    (tmp_path / "scontrol").write_text(SCONTROL)
    for f in tmp_path.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "RUNNING": running}
    out = subprocess.run(["sh", "-c", slurm_version_command()], capture_output=True, text=True, env=env, check=True)
    assert SLURM_VERSION.parse(out.stdout.splitlines()) == {
        "version": installed,
        "installed": {"sinfo": installed, "slurmd": installed, "slurmctld": installed},
        "running": {"slurmd": running, "slurmctld": running},
        "slurmctld_from": "ctl1",
    }


def test_a_daemon_that_does_not_answer_leaves_only_the_installed_versions(tmp_path: Path) -> None:
    (tmp_path / "slurmd").write_text("#!/bin/sh\necho 'slurm 24.11.5'\n")
    (tmp_path / "scontrol").write_text("#!/bin/sh\necho 'slurm_load_slurmd_status: Connection refused' >&2; exit 1\n")
    for f in tmp_path.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    out = subprocess.run(["sh", "-c", slurm_version_command()], capture_output=True, text=True, env=env, check=True)
    got = SLURM_VERSION.parse(out.stdout.splitlines())
    assert (got["installed"], got["running"]) == ({"slurmd": "24.11.5"}, {})


# --------------------------------------------------------------------------- the check, as data

EXPECTED = [
    # (spec change, node, installed, running) -> (status, message)
    (None, "node2", "22.05.8", None,
     (PASS, f"Slurm 22.05.8 (sinfo, slurmd running), as the spec implies ({DEB12})")),
    (None, "node1", "22.05.8", None,
     (PASS, f"Slurm 22.05.8 (sinfo, slurmctld running, slurmd running, slurmdbd), as the spec implies ({DEB12})")),
    # the packages moved, slurmd was not restarted: a restart, not an upgrade
    (pinned("24.11.5-1"), "node2", "24.11.5", "24.11.4",
     (FAIL, "slurmd on node2 runs 24.11.4 but 24.11.5 is installed (packages changed, daemon not restarted): "
            "restart slurmd (systemctl restart slurmd)")),
    # behind on a maintenance release of the pinned one
    (pinned("24.11.5-1"), "node2", "24.11.4", None,
     (FAIL, "node2 has Slurm 24.11.4 (sinfo, slurmd running), the spec implies 24.11.5 (versions.slurm 24.11.5-1): "
            "'gpuforge apply' installs versions.slurm 24.11.5-1 (a maintenance release of 24.11; 'gpuforge "
            "slurm-upgrade' does it without draining)")),
    # the spec moved on to a release inside the window, and to one outside it
    (pinned("23.11.4-1"), "node2", "22.05.8", None,
     (FAIL, "node2 has Slurm 22.05.8 (sinfo, slurmd running), the spec implies 23.11.4 (versions.slurm 23.11.4-1): "
            "'gpuforge slurm-upgrade' upgrades it in SchedMD's order (slurmdbd, slurmctld, then slurmd)")),
    (pinned("24.11.5-1"), "node2", "22.05.8", None,
     (FAIL, "node2 has Slurm 22.05.8 (sinfo, slurmd running), the spec implies 24.11.5 (versions.slurm 24.11.5-1): "
            "'gpuforge slurm-upgrade' refuses this jump: Slurm 24.11 upgrades in place only from 24.05, 23.11, 23.02 "
            "(SchedMD's compatibility window); 22.05 is further behind: upgrade in steps through those releases "
            "(jobs and accounting are lost otherwise)")),
    # newer than the spec: no downgrade
    (None, "node2", "24.11.5", None,
     (FAIL, f"node2 has Slurm 24.11.5 (sinfo, slurmd running), the spec implies 22.05.8 ({DEB12}): it is newer than "
            "the spec's: Slurm does not support downgrades once a daemon has started; set versions.slurm to the "
            "package of 24.11.5")),
    # the spec's version is not known before the nodes are read: judged for itself
    (lambda d: d["slurm"].update(source="site"), "node2", "26.05.3", None,
     (PASS, "Slurm 26.05.3 (sinfo, slurmd running); the spec implies no version (slurm.source site with "
            "versions.slurm distro takes the repository's version)")),
    (pinned("99.0.0-1", "distro"), "node2", "22.05.8", None,
     (PASS, "Slurm 22.05.8 (sinfo, slurmd running); the spec implies no version (versions.slurm 99.0.0-1 is no "
            "Slurm version gpuforge can read)")),
    (pinned("27.05.0-1"), "node2", "27.05.0", None,
     (PASS, "Slurm 27.05.0 (sinfo, slurmd running), as the spec implies (versions.slurm 27.05.0-1); gpuforge's "
            "parameter table does not know Slurm 27.05")),
    # a key of the rendered slurm.conf the running release does not take
    (pinned("25.11.2-1", process_tracking="linuxproc", health_check={"node_state": "START_ONLY"}), "node2",
     "25.11.2", "22.05.8",
     (FAIL, "slurmd on node2 runs 22.05.8 but 25.11.2 is installed (packages changed, daemon not restarted): "
            "restart slurmd (systemctl restart slurmd); Slurm 22.05 on node2 does not take slurm.conf's "
            "HealthCheckNodeState=START_ONLY (since 25.11)")),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "name", "installed", "running", "want"), EXPECTED)
def test_versions_in_check_results_out(
    tmp_path: Path, mutate: Any, name: str, installed: str, running: str | None, want: tuple[str, str]
) -> None:
    lines = lines_of(tmp_path, name, installed, running, mutate)
    assert judged(tmp_path, lines, name, mutate) == want


def test_the_recorded_outputs_judged(tmp_path: Path) -> None:
    """The facts fixtures of the reading, judged for the lab's node1 (Debian 12: 22.05.8 expected)."""
    rows = {
        case: judged(tmp_path, fixture(f"slurm/{case}")["output"], "node1")
        for case in ("slurm_version_debian_22_05", "slurm_version_upgraded_not_restarted_24_11",
                     "slurm_version_not_installed", "slurm_version_untrusted_output_dropped")
    }  # fmt: skip
    assert rows["slurm_version_debian_22_05"][0] == PASS
    assert rows["slurm_version_upgraded_not_restarted_24_11"] == (
        FAIL,
        "slurmd on node1 runs 24.11.4 but 24.11.5 is installed (packages changed, daemon not restarted): restart "
        f"slurmd (systemctl restart slurmd); node1 has Slurm 24.11.5 (sinfo, slurmd), the spec implies 22.05.8 "
        f"({DEB12}): it is newer than the spec's: Slurm does not support downgrades once a daemon has started; set "
        "versions.slurm to the package of 24.11.5",
    )
    assert rows["slurm_version_not_installed"] == (
        FAIL,
        "no Slurm binary on node1 answers -V (sinfo, slurmd, slurmctld, slurmdbd): is Slurm installed? "
        "'gpuforge apply' installs it",
    )
    assert "rm -rf" not in rows["slurm_version_untrusted_output_dropped"][1]
    assert "\x1b" not in rows["slurm_version_untrusted_output_dropped"][1]


def test_the_running_slurmctld_is_the_controllers_that_answered(tmp_path: Path) -> None:
    """A backup in control (26.05.3's ping lines): its version is not taken as the primary's."""
    lines = fixture("slurm/slurm_version_backup_in_control_26_05")["output"]
    assert judged(tmp_path, lines, "node1", pinned("26.05.3-1")) == (
        PASS, "Slurm 26.05.3 (sinfo, slurmctld), as the spec implies (versions.slurm 26.05.3-1)"
    )  # fmt: skip
    spec, _ = lab_spec(tmp_path)
    parsed = dict(SLURM_VERSION.parse(lines))
    assert sv.reported(parsed, replace(node(spec, "node1"), name="ctl2"))[1] == {"slurmctld": "26.05.3"}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "22.05.8",
        {"installed": {"slurmd": "22.05.8; reboot", "bash": "22.05.8"}, "running": ["22.05.8"]},
        {"installed": {"slurmd": 22.05}, "running": {"slurmd": "\x1b[31m22.05.8"}, "slurmctld_from": "node2"},
    ],
)
def test_an_answer_that_is_not_the_probes_format_is_not_believed(tmp_path: Path, raw: Any) -> None:
    """The node's JSON is untrusted: only versions and names of the probe's patterns are taken."""
    spec, _ = lab_spec(tmp_path)
    assert sv.reported(raw, node(spec, "node2")) == ({}, {})


def test_no_answer_from_the_node_program(tmp_path: Path) -> None:
    spec, path = lab_spec(tmp_path)
    data = ClusterData(spec, path, resolve_nodes(spec))
    assert sv.slurm_version(data, node(spec, "node2")) == (
        FAIL, "the node program returned no Slurm versions (an older node program?)"
    )  # fmt: skip


def test_validate_reads_the_versions_in_the_node_checks_round_trip(tmp_path: Path) -> None:
    """Through validate(): the node program is asked for the versions (Slurm nodes only) and node2's
    slurmd, not restarted after its packages moved, fails the check there."""
    spec, path = lab_spec(tmp_path)
    fake = FakeCluster(spec)
    fake.outputs["node2"]["slurm_version"] = slurm_version_lines(node(spec, "node2"), "22.05.8", "22.05.7")
    report = validate(Cluster.of(spec, path), checks="scheduler.slurm_version", transport=fake)
    rows = {n.name: {r.id: r for r in n.checks} for n in report.nodes}
    assert {name: r["scheduler.slurm_version"].status for name, r in rows.items()} == {
        "node1": PASS, "node2": FAIL, "node3": PASS
    }  # fmt: skip
    assert rows["node2"]["scheduler.slurm_version"].message.startswith("slurmd on node2 runs 22.05.7 but 22.05.8")
    assert [r.id for r in report.nodes[0].checks] == ["connection.ssh", "scheduler.slurm_version"]
    assert len(fake.calls) == 3  # one round trip per node, no more


def test_the_check_is_registered_and_cites_each_format() -> None:
    check = BY_ID["scheduler.slurm_version"]
    assert (check.layer, check.scope, check.depends_on) == ("scheduler", "cluster", ("connection.ssh",))
    assert [c.id for c in resolve("scheduler.slurm_version")] == ["connection.ssh", "scheduler.slurm_version"]
    assert set(sv.SOURCES) == {"version-flag", "slurmd-status", "ctld-config", "ctld-ping"}
    for citation in sv.SOURCES.values():
        assert "github.com/SchedMD/slurm" in citation.where and citation.section


def test_the_expected_version_per_platform(tmp_path: Path) -> None:
    """Each node group's own distribution under ``distro``; the pin on every node otherwise."""

    def two_os(data: dict[str, Any]) -> None:
        data["node_groups"][0]["os"] = "ubuntu24.04"

    spec, _ = lab_spec(tmp_path, two_os)
    assert sv.expected_slurm(spec, node(spec, "node1")) == sv.Expected(
        "23.11.4", "the Ubuntu 24.04 LTS archive, 23.11.4-1.2ubuntu5", False
    )
    assert sv.expected_slurm(spec, node(spec, "node2")).version == "22.05.8"
    spec, _ = lab_spec(tmp_path, pinned("24.11.5-1"))
    assert {sv.expected_slurm(spec, n).version for n in resolve_nodes(spec)} == {"24.11.5"}

"""The pure parts of gpuforge power: reset type choice, ComputerSystem parsing, boot override
requests (Redfish PATCH bodies, IPMI devices), the Slurm verdict, credentials files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuforge.bmc import day2, transport
from gpuforge.bmc.ipmi import CHASSIS, bootdev_needed
from gpuforge.bmc.redfish import SystemState, boot_patch, choose_reset_type, parse_system
from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.bmc.targets import PowerInputError, read_credentials
from gpuforge.bmc.transport import Credentials

SUSHY = ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn")


@pytest.mark.parametrize(
    ("action", "allowable", "sent"),
    [
        (PowerAction.ON, SUSHY, "On"),
        (PowerAction.OFF, SUSHY, "ForceOff"),
        (PowerAction.CYCLE, SUSHY, "ForceRestart"),
        (PowerAction.CYCLE, (*SUSHY, "PowerCycle"), "PowerCycle"),
        (PowerAction.CYCLE, None, "PowerCycle"),
        (PowerAction.ON, ("ForceOn",), "ForceOn"),
        (PowerAction.OFF, ("GracefulShutdown",), "GracefulShutdown"),
        (PowerAction.OFF, ("On", "Nmi"), None),
    ],
)
def test_the_reset_type_is_the_first_the_system_advertises(
    action: PowerAction, allowable: tuple[str, ...] | None, sent: str | None
) -> None:
    assert choose_reset_type(action, allowable) == sent


def test_a_system_resource_is_read_for_power_boot_and_its_reset_action() -> None:
    body = {
        "PowerState": "On",
        "Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"},
        "Actions": {"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                                              "ResetType@Redfish.AllowableValues": ["On", "ForceOff"]}},
    }  # fmt: skip
    s = parse_system("/redfish/v1/Systems/1", body)
    assert (s.power_state, s.boot_target, s.boot_enabled) == ("On", "Pxe", "Once")
    assert (s.reset_target, s.allowable) == ("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", ("On", "ForceOff"))
    bare = parse_system("/redfish/v1/Systems/1", {"Boot": "x", "Actions": []})
    assert (bare.power_state, bare.boot_target, bare.reset_target, bare.allowable) == (None, None, None, None)
    with pytest.raises(ValueError):
        parse_system("/redfish/v1/Systems/1", [])


def test_the_slurm_verdict_allows_only_out_of_service_nodes_without_jobs() -> None:
    assert day2.slurm_command(["cpu1", "cpu2", "cpu3"]) == (
        "sinfo -h -N -n 'cpu[1-3]' -o '%N|%T' && echo @@gpuforge-squeue && squeue -h -w 'cpu[1-3]' -o '%N'"
    )
    out = "a1|drained\na2|down*\na3|fail\na4|draining\na5|idle\na6|drained\na6|idle\na7|mixed+drain\n"
    out += "@@gpuforge-squeue\na[6-7]\n"
    states, busy = day2.parse_slurm(out)
    assert busy == {"a6", "a7"} and states["a6"] == "drained"
    verdicts = day2.slurm_verdicts([f"a{i}" for i in range(1, 9)], states, busy)
    assert sorted(verdicts) == ["a4", "a5", "a6", "a7", "a8"]
    assert verdicts["a6"] == "jobs still run on it (state drained, squeue lists them)"
    assert verdicts["a8"].startswith("Slurm does not list it")


@pytest.mark.parametrize(
    ("text", "user", "password"),
    [("admin:pa:ss\n", "admin", "pa:ss"), ("admin\npa ss\n", "admin", "pa ss"), ("\nadmin:x\n\n", "admin", "x")],
)
def test_credentials_files_hold_one_line_or_two(tmp_path: Path, text: str, user: str, password: str) -> None:
    path = tmp_path / "c"
    path.write_text(text)
    path.chmod(0o600)
    assert read_credentials(path, "f") == Credentials(user, password)


@pytest.mark.parametrize("text", ["admin\n", "admin:\n", "a\nb\nc\n", "x" * 5000])
def test_a_malformed_credentials_file_is_refused_without_its_content(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(PowerInputError) as e:
        read_credentials(path, "node_groups[0].bmc.credentials_file")
    assert str(e.value).startswith(f"node_groups[0].bmc.credentials_file: {path}: not 'username:password'")


def test_a_directory_is_not_a_credentials_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir(mode=0o700)
    with pytest.raises(PowerInputError, match="not a regular file"):
        read_credentials(tmp_path / "d", "f")


def test_the_password_is_in_no_repr() -> None:
    c = Credentials("admin", "hidden-pw")
    assert "hidden-pw" not in repr(c) and "hidden-pw" not in str(c)


def _state(target: str | None, enabled: str | None, **kw: object) -> SystemState:
    return SystemState("/redfish/v1/Systems/1", "On", target, enabled, None, None, **kw)  # type: ignore[arg-type]


PXE_ONCE = {"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}


def test_the_boot_override_patch_is_nothing_when_already_so_and_keeps_the_mode() -> None:
    assert boot_patch(_state("Hdd", "Continuous"), BootTarget.PXE, False) == PXE_ONCE
    assert boot_patch(_state("Pxe", "Once"), BootTarget.PXE, False) is None
    assert boot_patch(_state("Pxe", "Continuous"), BootTarget.PXE, False) == PXE_ONCE  # once is not continuous
    assert boot_patch(_state("Pxe", "Once"), BootTarget.PXE, True) == {
        "Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Continuous"}
    }
    assert boot_patch(_state("Pxe", "Once", boot_mode="Legacy"), BootTarget.DISK, False) == {
        "Boot": {
            "BootSourceOverrideTarget": "Hdd",
            "BootSourceOverrideEnabled": "Once",
            "BootSourceOverrideMode": "Legacy",
        }
    }
    assert boot_patch(_state("Pxe", "Once"), BootTarget.NONE, False) == {
        "Boot": {"BootSourceOverrideTarget": "None", "BootSourceOverrideEnabled": "Disabled"}
    }
    assert boot_patch(_state("Pxe", "Disabled"), BootTarget.NONE, False) is None
    assert boot_patch(_state("None", "Once"), BootTarget.NONE, False) is None


def test_a_boot_override_the_system_does_not_allow_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^it does not allow BootSourceOverrideTarget Pxe \(it allows Hdd, Cd\)$"):
        boot_patch(_state("Hdd", "Once", boot_targets=("Hdd", "Cd")), BootTarget.PXE, False)
    with pytest.raises(
        ValueError, match=r"^it does not allow BootSourceOverrideEnabled Continuous \(it allows Once\)$"
    ):
        boot_patch(_state("Hdd", "Once", boot_enabled_values=("Once",)), BootTarget.PXE, True)
    assert boot_patch(_state("Hdd", "Once", boot_targets=("Pxe",)), BootTarget.DISK, False) is None  # already so


def test_a_system_resource_is_read_for_its_boot_override_choices_and_etag() -> None:
    boot = {"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideMode": "UEFI",
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "Hdd", 3],
            "BootSourceOverrideEnabled@Redfish.AllowableValues": ["Once", "Continuous"]}  # fmt: skip
    s = parse_system("/redfish/v1/Systems/1", {"Boot": boot}, 'W/"7"')
    assert (s.boot_targets, s.boot_enabled_values) == (("Pxe", "Cd", "Hdd"), ("Once", "Continuous"))
    assert (s.boot_mode, s.etag) == ("UEFI", 'W/"7"')
    bare = parse_system("/redfish/v1/Systems/1", {"Boot": {"BootSourceOverrideMode": 1}})
    assert (bare.boot_targets, bare.boot_enabled_values, bare.boot_mode, bare.etag) == (None, None, None, None)


def test_only_a_printable_etag_is_sent_back() -> None:
    assert transport._etag(' W/"abc" ') == 'W/"abc"'
    assert [transport._etag(v) for v in (None, "", "a\r\nX-Evil: 1", "x" * 300)] == [None] * 4


def test_the_ipmi_boot_device_is_sent_only_when_not_already_so() -> None:
    hd_once = SystemState(CHASSIS, "On", "hd", "Once", None, None)
    assert bootdev_needed(hd_once, BootTarget.PXE, False) == ("network", "Once")
    assert bootdev_needed(hd_once, BootTarget.DISK, False) is None
    assert bootdev_needed(hd_once, BootTarget.DISK, True) == ("hd", "Continuous")
    assert bootdev_needed(hd_once, BootTarget.NONE, False) == ("default", "Disabled")
    assert bootdev_needed(SystemState(CHASSIS, "On", "default", "Disabled", None, None), BootTarget.NONE, False) is None

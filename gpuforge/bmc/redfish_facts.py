"""Redfish facts gpuforge relies on, each with where it was read.

The paths, property names and ResetType values below are DMTF Redfish's (the ComputerSystem and
Resource schemas); gpuforge's tests run them against OpenStack sushy-tools' Redfish emulator,
whose templates and routes are cited as the second source.
"""

from __future__ import annotations

from enum import StrEnum

from gpuforge.spec.citation import Citation

SYSTEMS = "/redfish/v1/Systems"
"""The ComputerSystem collection: ``Members`` holds one ``{"@odata.id": path}`` per system."""
RESET_ACTION = "#ComputerSystem.Reset"
"""The key of the reset action under a system's ``Actions``; its ``target`` is the path to POST to."""
ALLOWABLE = "ResetType@Redfish.AllowableValues"
"""The reset types the service accepts, listed beside the action's ``target`` (when it lists them)."""
POWER_STATE = "PowerState"
BOOT = "Boot"
BOOT_TARGET = "BootSourceOverrideTarget"
BOOT_ENABLED = "BootSourceOverrideEnabled"


class PowerAction(StrEnum):
    """What ``gpuforge power`` asks of a node's BMC."""

    ON = "on"
    OFF = "off"
    CYCLE = "cycle"


#: ResetType values per action, in order of preference: the first the system advertises is sent
#: (the first of all when it advertises none). ``off`` is immediate (the node is drained first);
#: ``cycle`` of a system that is off sends the ``on`` types instead.
RESET_TYPES: dict[PowerAction, tuple[str, ...]] = {
    PowerAction.ON: ("On", "ForceOn"),
    PowerAction.OFF: ("ForceOff", "GracefulShutdown"),
    PowerAction.CYCLE: ("PowerCycle", "ForceRestart", "GracefulRestart"),
}

#: The PowerState that an action ends in (``cycle`` ends powered on).
END_STATE: dict[PowerAction, str] = {PowerAction.ON: "On", PowerAction.OFF: "Off", PowerAction.CYCLE: "On"}

CITATIONS: tuple[Citation, ...] = (
    Citation(
        "DMTF Redfish-Tacklebox: rf_power_reset",
        "https://github.com/DMTF/Redfish-Tacklebox/blob/main/docs/rf_power_reset.md",
        "--type {On,ForceOff,GracefulShutdown,GracefulRestart,ForceRestart,Nmi,ForceOn,PushPowerButton,"
        "PowerCycle,Suspend,Pause,Resume}",
    ),
    Citation(
        "DMTF Redfish Resource schema, ResetType (as generated into redfish-codegen)",
        "https://docs.rs/redfish-codegen/latest/redfish_codegen/models/resource/enum.ResetType.html",
        "ForceOff: This value shall indicate the resource will transition to a power off state. The transition "
        "will start immediately. Upon successful completion, the PowerState property, if supported, shall "
        "contain the value Off.",
    ),
    Citation(
        "OpenStack sushy-tools, Redfish emulator: ComputerSystem template",
        "https://opendev.org/openstack/sushy-tools/src/branch/master/sushy_tools/emulator/templates/system.json",
        '"PowerState", "Boot": {"BootSourceOverrideEnabled", "BootSourceOverrideTarget"}, "Actions": '
        '{"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/%s/Actions/ComputerSystem.Reset", '
        '"ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "GracefulRestart", '
        '"ForceRestart", "Nmi", "ForceOn"]}}',
    ),
    Citation(
        "OpenStack sushy-tools, Redfish emulator: routes",
        "https://opendev.org/openstack/sushy-tools/src/branch/master/sushy_tools/emulator/main.py",
        "@app.route('/redfish/v1/Systems') ... @app.route('/redfish/v1/Systems/<identity>/Actions/"
        "ComputerSystem.Reset', methods=['POST']) ... reset_type = flask.request.json.get('ResetType')",
    ),
)

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
BOOT_MODE = "BootSourceOverrideMode"
"""UEFI or Legacy: sent back unchanged in a boot override PATCH when the system shows it (never changed)."""
BOOT_TARGETS_ALLOWED = f"{BOOT_TARGET}@Redfish.AllowableValues"
BOOT_ENABLED_ALLOWED = f"{BOOT_ENABLED}@Redfish.AllowableValues"


class PowerAction(StrEnum):
    """What ``gpuforge power`` asks of a node's BMC."""

    ON = "on"
    OFF = "off"
    CYCLE = "cycle"


class BootTarget(StrEnum):
    """What ``gpuforge power bootdev --target`` asks the next boot(s) to start from."""

    PXE = "pxe"
    DISK = "disk"
    NONE = "none"


#: The BootSourceOverrideTarget of each target (DMTF ComputerSystem ``BootSource``): ``none`` is
#: sent with BootSourceOverrideEnabled ``Disabled``, as DMTF's rf_boot_override does.
BOOT_SOURCE: dict[BootTarget, str] = {BootTarget.PXE: "Pxe", BootTarget.DISK: "Hdd", BootTarget.NONE: "None"}
#: BootSourceOverrideEnabled for a one-time (``--once``) and a persistent (``--persistent``) override,
#: and for no override at all.
ENABLED_ONCE, ENABLED_CONTINUOUS, ENABLED_DISABLED = "Once", "Continuous", "Disabled"

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

BOOT_CITATIONS: tuple[Citation, ...] = (
    Citation(
        "DMTF Redfish schema ComputerSystem.json, BootSource (the values of BootSourceOverrideTarget)",
        "https://github.com/DMTF/Redfish-Publications/blob/main/json-schema/ComputerSystem.json",
        '"enum": ["None", "Pxe", "Floppy", "Cd", "Usb", "Hdd", "BiosSetup", "Utilities", "Diags", "UefiShell", '
        '"UefiTarget", "SDCard", "UefiHttp", "RemoteDrive", "UefiBootNext"] ... "Hdd": "Boot from a hard drive.", '
        '"None": "Boot from the normal boot device.", "Pxe": "Boot from the Pre-Boot EXecution (PXE) environment."',
    ),
    Citation(
        "DMTF Redfish schema ComputerSystem.v1_20_1, BootSourceOverrideEnabled (as generated into redfish-codegen)",
        "https://docs.rs/redfish-codegen/0.3.1/src/redfish_codegen/models/computer_system/v1_20_1/"
        "boot_source_override_enabled.rs.html",
        "Disabled: The system boots normally. Once: On its next boot cycle, the system boots one time to the boot "
        "source override target. Then, the BootSourceOverrideEnabled value is reset to `Disabled`. Continuous: The "
        "system boots to the target specified in the BootSourceOverrideTarget property until this property is "
        "`Disabled`.",
    ),
    Citation(
        "DMTF Redfish-Tacklebox: redfish_utilities/systems.py, set_system_boot",
        "https://github.com/DMTF/Redfish-Tacklebox/blob/main/redfish_utilities/systems.py",
        'payload = {"Boot": {}} ... payload["Boot"]["BootSourceOverrideTarget"] = ov_target ... '
        'etag = system.getheader("ETag") if etag is not None: headers = {"If-Match": etag} '
        'response = context.patch(system.dict["@odata.id"], body=payload, headers=headers)',
    ),
    Citation(
        "DMTF Redfish-Tacklebox: scripts/rf_boot_override.py (a one time boot override; target None disables it)",
        "https://github.com/DMTF/Redfish-Tacklebox/blob/main/scripts/rf_boot_override.py",
        'boot_enable = "Once" ... if args.target == "None": print("Disabling one time boot...") '
        'boot_enable = "Disabled"',
    ),
    Citation(
        "OpenStack sushy-tools 2.2.0, Redfish emulator: PATCH of a system (main.py, system_resource)",
        "https://opendev.org/openstack/sushy-tools/src/branch/master/sushy_tools/emulator/main.py",
        "target = boot.get('BootSourceOverrideTarget') mode = boot.get('BootSourceOverrideMode') ... "
        '# NOTE(lucasagomes): In libvirt we always set the boot device frequency to "continuous" so, we are '
        "ignoring the BootSourceOverrideEnabled element here app.systems.set_boot_device(identity, target) ... "
        "return '', 204",
    ),
    Citation(
        "OpenStack sushy-tools 2.2.0, Redfish emulator: ComputerSystem template, Boot",
        "https://opendev.org/openstack/sushy-tools/src/branch/master/sushy_tools/emulator/templates/system.json",
        '"BootSourceOverrideEnabled": "Continuous", "BootSourceOverrideTarget": {{ boot_source_target }}, '
        '"BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "Hdd", "UefiHttp"] (UEFI mode; '
        '"Pxe", "Cd", "Hdd" otherwise), "BootSourceOverrideMode": {{ boot_source_mode }}',
    ),
    Citation(
        "OpenStack sushy-tools 2.2.0: the fake and libvirt systems drivers, set_boot_device",
        "https://opendev.org/openstack/sushy-tools/src/branch/master/sushy_tools/emulator/resources/systems/",
        "fakedriver.py: def set_boot_device(self, identity, boot_source): self._update(identity, "
        "boot_device=boot_source) ... libvirtdriver.py: BOOT_DEVICE_MAP = { constants.DEVICE_TYPE_PXE: 'network', "
        "constants.DEVICE_TYPE_HDD: 'hd', constants.DEVICE_TYPE_CD: 'cdrom', constants.DEVICE_TYPE_FLOPPY: "
        "'floppy' }",
    ),
)

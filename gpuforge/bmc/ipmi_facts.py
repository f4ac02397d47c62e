"""IPMI facts gpuforge relies on: pyghmi's calls and the values they take and give, each with where
it was read (pyghmi 1.6.19's source, as its wheel ships it).

gpuforge speaks IPMI 2.0 (RMCP+, UDP) through ``pyghmi.ipmi.command.Command``:

* ``get_power()`` answers ``{'powerstate': 'on' | 'off'}`` (Get Chassis Status, bit 0);
* ``get_bootdev()`` answers ``{'bootdev': NAME, 'persistent': bool, ...}`` (Get System Boot
  Options, boot flags); ``'default'`` is "no override";
* ``set_power(STATE)`` sends Chassis Control, after reading the power state itself: a state
  already reached sends nothing. ``'reset'`` is a hard reset (directive 3) without waiting for the
  OS, the nearest of its states to Redfish's ForceRestart; it has no power-cycle state;
* ``set_bootdev(NAME, persist=BOOL)`` sends Set System Boot Options (boot flags, valid bit set):
  ``persist`` asks for every boot instead of the next one only ("many systems do not honor this");
  ``'default'`` removes the override. It reads nothing first: gpuforge compares ``get_bootdev()``.
"""

from __future__ import annotations

from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.spec.citation import Citation

#: The pyghmi ``set_power`` state sent for each action of a system that is on; ``cycle`` of a
#: system that is off sends ``on`` (:data:`CYCLE_WHEN_OFF`), as Redfish's does.
SET_POWER: dict[PowerAction, str] = {PowerAction.ON: "on", PowerAction.OFF: "off", PowerAction.CYCLE: "reset"}
CYCLE_WHEN_OFF = "on"

#: pyghmi's ``powerstate`` in the rows' words (the same as Redfish's PowerState values).
POWER_STATE: dict[str, str] = {"on": "On", "off": "Off"}

#: The PowerState each action ends in (``cycle`` ends powered on).
END_STATE: dict[PowerAction, str] = {PowerAction.ON: "On", PowerAction.OFF: "Off", PowerAction.CYCLE: "On"}

#: ``get_bootdev()``'s ``persistent`` in the rows' words (Redfish's BootSourceOverrideEnabled):
#: persistent applies to every boot, else to the next one only.
BOOT_ENABLED: dict[bool, str] = {True: "Continuous", False: "Once"}
#: The bootdev that means "no override" and what the row says of it instead.
NO_OVERRIDE = "default"
NO_OVERRIDE_ENABLED = "Disabled"

#: The pyghmi ``set_bootdev`` device of each boot target (names of its ``boot_devices`` table that
#: ``get_bootdev()`` answers with again: 'network' is 4, 'hd' 8, 'default' 0).
SET_BOOTDEV: dict[BootTarget, str] = {BootTarget.PXE: "network", BootTarget.DISK: "hd", BootTarget.NONE: "default"}

#: pyghmi's message for a password the BMC refused (RAKP 2's HMAC does not match).
WRONG_PASSWORD = "Incorrect password provided"

PYGHMI = "https://github.com/openstack/pyghmi/blob/master/pyghmi/ipmi"

CITATIONS: tuple[Citation, ...] = (
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/command.py, Command.set_power",
        f"{PYGHMI}/command.py",
        ":param powerstate: * on -- Request system turn on * off -- Request system turn off without waiting "
        "for OS to shutdown * shutdown -- Have system request OS proper shutdown * reset -- Request system "
        "reset without waiting for OS * boot -- If system is off, then 'on', else 'reset' ... "
        "oldpowerstate = self._get_power_state(bridge_request=bridge_request) if oldpowerstate == "
        "newpowerstate: return {'powerstate': oldpowerstate}",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/command.py, power_states and Command.get_power",
        f"{PYGHMI}/command.py",
        'power_states = { "off": 0, "on": 1, "reset": 3, "diag": 4, "softoff": 5, "shutdown": 5, "boot": -1 } '
        "... The response, if successful, should contain 'powerstate' key and either 'on' or 'off' to "
        "indicate current state.",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/command.py, Command.get_bootdev",
        f"{PYGHMI}/command.py",
        "return {'bootdev': 'default', 'persistent': True} ... if response['data'][2] & 0b1000000: "
        "persistent = True ... return {'bootdev': bootdev, 'persistent': persistent, 'uefimode': uefimode}",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/bmc.py, Bmc.control_chassis (the server side)",
        f"{PYGHMI}/bmc.py",
        "if directive == 0: rc = self.power_off() elif directive == 1: rc = self.power_on() elif directive == 2: "
        "rc = self.power_cycle() elif directive == 3: rc = self.power_reset()",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/private/session.py, Session._got_rakp2",
        f"{PYGHMI}/private/session.py",
        "if givenhash != expectedhash: self.sessioncontext = \"FAILED\" self.onlogon({'error': "
        '"Incorrect password provided"})',
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/command.py, Command.set_user_password (IPMI 2.0's 20-byte passwords)",
        f"{PYGHMI}/command.py",
        "if 21 > len(password) > 16: password = password.ljust(20, b'\\x00') ... elif len(password) > 20: "
        "raise Exception('password has limit of 20 chars')",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/command.py, boot_devices and Command.set_bootdev",
        f"{PYGHMI}/command.py",
        "boot_devices = { 'net': 4, 'network': 4, 'pxe': 4, 'http': 4, 'hd': 8, ... 'default': 0x0, ... 1: "
        "'network', 2: 'hd', ... 0: 'default' } ... def set_bootdev(self, bootdev, persist=False, "
        "uefiboot=False): ... :param persist: If true, ask that system firmware use this device beyond next "
        "boot. Be aware many systems do not honor this ... bootflags = 0x80 ... if persist: bootflags |= 1 << 6 "
        "if bootdevnum == 0: bootflags = 0 data = (5, bootflags, bootdevnum, 0, 0, 0)",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/bmc.py, Bmc.set_system_boot_options and "
        "get_system_boot_options (the server side)",
        f"{PYGHMI}/bmc.py",
        "elif request['data'][0] == 5: bootdevice = (request['data'][2] >> 2) & 0b1111 ... "
        "self.set_boot_device(bootdevice) ... paramdata = [1, 5, 0b10000000, bootdevice, 0, 0, 0]",
    ),
    Citation(
        "pyghmi 1.6.19 (its wheel): pyghmi/ipmi/private/session.py, retry timing",
        f"{PYGHMI}/private/session.py",
        "initialtimeout = 0.5 ... self.maxtimeout = 2  # be aggressive about giving up on initial packet",
    ),
)

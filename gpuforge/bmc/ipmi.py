"""A node's chassis through IPMI 2.0 (RMCP+ over UDP, pyghmi): read its power and boot override,
power it on, off or reset it, set its boot device.

Invariants:

* the rows are Redfish's shape (:class:`~gpuforge.bmc.redfish.SystemState`,
  :class:`~gpuforge.bmc.redfish.ResetDone`): power "On"/"Off", the boot override, and the state
  sent (a pyghmi ``set_power`` state, :data:`~gpuforge.bmc.ipmi_facts.SET_POWER`);
* an action already done (``on`` of a chassis that is on) sends nothing; ``cycle`` of a chassis
  that is off powers it on; a boot device already set as asked (device and persistence, as
  ``get_bootdev()`` reads them) is not sent again, and the override is read back after setting;
* every failure is a :class:`BmcError` naming the BMC (address:port), never the password, never a
  traceback; pyghmi gives up on a BMC that does not answer after its own bounded retries (a few
  seconds: :data:`~gpuforge.bmc.ipmi_facts.CITATIONS`); the session is logged out after each node
  (BMCs hold few sessions).

IPMI has no server identity: RMCP+ proves that both ends know the password, nothing more, and its
RAKP exchange hands a password hash to anyone who asks (docs/bare-metal.md). Prefer Redfish.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from gpuforge.bmc import ipmi_facts as ipf
from gpuforge.bmc.redfish import BootDone, ResetDone, SystemState
from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.bmc.transport import BmcError, Credentials, Endpoint

CHASSIS = "IPMI chassis"
"""The ``path`` of an IPMI system's state (one chassis per BMC)."""

_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]+")
T = TypeVar("T")


def parse_power(answer: Any) -> str | None:
    """``get_power()``'s ``powerstate`` in Redfish's words (None: not a known state)."""
    value = answer.get("powerstate") if isinstance(answer, dict) else None
    return ipf.POWER_STATE.get(value) if isinstance(value, str) else None


def parse_bootdev(answer: Any) -> tuple[str | None, str | None]:
    """``get_bootdev()``'s override as (target, enabled): ``default`` is no override (Disabled)."""
    if not isinstance(answer, dict):
        return None, None
    device, persistent = answer.get("bootdev"), answer.get("persistent")
    target = str(device) if isinstance(device, str | int) else None
    if target == ipf.NO_OVERRIDE:
        return target, ipf.NO_OVERRIDE_ENABLED
    return target, ipf.BOOT_ENABLED.get(persistent) if isinstance(persistent, bool) else None


def chosen_state(action: PowerAction, power_state: str | None) -> str | None:
    """The ``set_power`` state for ``action`` (None: already done, nothing to send)."""
    if action is not PowerAction.CYCLE and power_state == ipf.END_STATE[action]:
        return None
    if action is PowerAction.CYCLE and power_state == "Off":
        return ipf.CYCLE_WHEN_OFF
    return ipf.SET_POWER[action]


def bootdev_needed(state: SystemState, target: BootTarget, persistent: bool) -> tuple[str, str] | None:
    """The (device, row's enabled word) to send for ``target`` (None: it is already the override)."""
    device = ipf.SET_BOOTDEV[target]
    if target is BootTarget.NONE:
        return None if state.boot_target == ipf.NO_OVERRIDE else (device, ipf.NO_OVERRIDE_ENABLED)
    enabled = ipf.BOOT_ENABLED[persistent]
    return None if (state.boot_target, state.boot_enabled) == (device, enabled) else (device, enabled)


def error_text(e: BaseException, creds: Credentials) -> str:
    """What went wrong, for a message: pyghmi's text (None: no answer), never the password."""
    text = str(e.args[0]) if e.args and e.args[0] is not None else ""
    if isinstance(e, TimeoutError) or not text or text == "None":
        return "no answer over IPMI (UDP): is it the BMC's address and port, and is IPMI over LAN enabled?"
    if text == ipf.WRONG_PASSWORD:
        return "the BMC refused the credentials (wrong password); check bmc.credentials_file"
    if creds.password:
        text = text.replace(creds.password, "***")
    return "IPMI: " + _UNPRINTABLE.sub(" ", text)[:200]


def _forget(session: Any) -> None:
    """Drop a logged-out session from pyghmi's table of sessions being set up. pyghmi (1.6) keeps it
    there after logout and hands it to the next ``Command`` for the same BMC in this process, which
    then fails ("'<' not supported between instances of 'float' and 'NoneType'" in ``raw_command``):
    seen when one process sets a node's boot device and then cycles it (``provision --reimage``)."""
    table = getattr(type(session), "initting_sessions", None)
    if isinstance(table, dict):
        for key in [k for k, v in table.items() if v is session]:
            del table[key]


class IpmiSystem:
    """One node's chassis behind its IPMI BMC (one session per instance, opened on first use)."""

    def __init__(self, endpoint: Endpoint, creds: Credentials) -> None:
        self.endpoint, self.creds = endpoint, creds

    def _call(self, what: Callable[[Any], T]) -> T:
        """``what(command)`` in a session of its own, logged out after; pyghmi's failures as BmcError."""
        try:
            from pyghmi.ipmi import command

            cmd = command.Command(
                bmc=self.endpoint.host, userid=self.creds.username, password=self.creds.password,
                port=self.endpoint.port,
            )  # fmt: skip
        except Exception as e:  # pyghmi raises IpmiException, and OSError or struct.error on odd answers
            raise BmcError(f"{self.endpoint.label}: {error_text(e, self.creds)}") from None
        try:
            return what(cmd)
        except BmcError:
            raise
        except Exception as e:
            raise BmcError(f"{self.endpoint.label}: {error_text(e, self.creds)}") from None
        finally:
            # a BMC that stopped answering cannot log out: the session times out on its side
            with contextlib.suppress(Exception):
                cmd.ipmi_session.logout()
            _forget(getattr(cmd, "ipmi_session", None))

    def _read(self, cmd: Any) -> SystemState:
        power = parse_power(cmd.get_power())
        target, enabled = parse_bootdev(cmd.get_bootdev())
        return SystemState(CHASSIS, power, target, enabled, None, None)

    def state(self) -> SystemState:
        return self._call(self._read)

    def act(self, action: PowerAction) -> ResetDone:
        """Ask for ``action``; nothing is sent when the chassis is already in its end state (on, off)."""

        def run(cmd: Any) -> ResetDone:
            before = self._read(cmd)
            if before.power_state is None:
                raise BmcError(f"{self.endpoint.label}: no power state in its answer")
            state = chosen_state(action, before.power_state)
            if state is not None:
                cmd.set_power(state)
            return ResetDone(before, state)

        return self._call(run)

    def set_boot(self, target: BootTarget, persistent: bool) -> BootDone:
        """Set the boot device (nothing is sent when it is already so) and read it back."""

        def run(cmd: Any) -> BootDone:
            before = self._read(cmd)
            needed = bootdev_needed(before, target, persistent)
            if needed is None:
                return BootDone(before, None, before)
            answer = cmd.set_bootdev(needed[0], persist=persistent)
            if isinstance(answer, dict) and "error" in answer:  # pyghmi's answer to a device it does not know
                raise BmcError(f"{self.endpoint.label}: IPMI: {str(answer['error'])[:200]}")
            return BootDone(before, f"{needed[0]} ({needed[1]})", self._read(cmd))

        return self._call(run)

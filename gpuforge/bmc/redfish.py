"""A node's ComputerSystem through Redfish: find it, read its power and boot override, reset it.

Invariants: the system is the spec's ``system_id`` or else the only member of the Systems
collection (several, or none, is an error naming them); a reset sends the first ResetType of
:data:`~gpuforge.bmc.redfish_facts.RESET_TYPES` that the system advertises in
``ResetType@Redfish.AllowableValues`` (any, in that order, when it lists none) to the action's own
``target``; an action already done (``on`` of a system that is On) sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.bmc import redfish_facts as rf
from gpuforge.bmc.redfish_facts import PowerAction
from gpuforge.bmc.transport import BmcError, Credentials, Endpoint, request


@dataclass(frozen=True)
class SystemState:
    """What a ComputerSystem resource says about power and boot."""

    path: str
    power_state: str | None
    boot_target: str | None
    boot_enabled: str | None
    reset_target: str | None
    allowable: tuple[str, ...] | None


@dataclass(frozen=True)
class ResetDone:
    """What an action did: the ResetType sent (None: nothing, the system was already there)."""

    before: SystemState
    reset_type: str | None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_system(path: str, body: Any) -> SystemState:
    """A ComputerSystem resource's power, boot override and reset action."""
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    boot = _object(body.get(rf.BOOT))
    reset = _object(_object(body.get("Actions")).get(rf.RESET_ACTION))
    allowed = reset.get(rf.ALLOWABLE)
    allowable = tuple(v for v in allowed if isinstance(v, str)) if isinstance(allowed, list) else None
    return SystemState(
        path=path,
        power_state=_text(body.get(rf.POWER_STATE)),
        boot_target=_text(boot.get(rf.BOOT_TARGET)),
        boot_enabled=_text(boot.get(rf.BOOT_ENABLED)),
        reset_target=_text(reset.get("target")),
        allowable=allowable,
    )


def choose_reset_type(action: PowerAction, allowable: tuple[str, ...] | None) -> str | None:
    """The first ResetType for ``action`` that the system advertises (None: it advertises none of them)."""
    for reset_type in rf.RESET_TYPES[action]:
        if allowable is None or reset_type in allowable:
            return reset_type
    return None


class RedfishSystem:
    """One node's ComputerSystem behind its BMC."""

    def __init__(self, endpoint: Endpoint, creds: Credentials, system_id: str | None) -> None:
        self.endpoint, self.creds, self.system_id = endpoint, creds, system_id

    def _get(self, path: str) -> Any:
        return request(self.endpoint, self.creds, "GET", path)

    def system_path(self) -> str:
        if self.system_id is not None:
            return f"{rf.SYSTEMS}/{self.system_id}"
        members = _object(self._get(rf.SYSTEMS)).get("Members")
        ids = [_object(m).get("@odata.id") for m in members] if isinstance(members, list) else []
        paths = [p for p in ids if isinstance(p, str)]
        if len(paths) != 1:
            listed = ", ".join(p.rsplit("/", 1)[-1] for p in paths[:8]) or "none"
            raise BmcError(
                f"{self.endpoint.label}: {len(paths)} systems in {rf.SYSTEMS} ({listed}): "
                "name the node's system with bmc.system_id"
            )
        return paths[0]

    def state(self) -> SystemState:
        path = self.system_path()
        try:
            return parse_system(path, self._get(path))
        except ValueError as e:
            raise BmcError(f"{self.endpoint.label}: {path}: {e}") from None

    def act(self, action: PowerAction) -> ResetDone:
        """Ask for ``action``; nothing is sent when the system is already in its end state (on, off)."""
        before = self.state()
        if action is not PowerAction.CYCLE and before.power_state == rf.END_STATE[action]:
            return ResetDone(before, None)
        wanted = PowerAction.ON if action is PowerAction.CYCLE and before.power_state == "Off" else action
        reset_type = choose_reset_type(wanted, before.allowable)
        if reset_type is None:
            raise BmcError(
                f"{self.endpoint.label}: {before.path} advertises none of {', '.join(rf.RESET_TYPES[wanted])} "
                f"(it allows {', '.join(before.allowable or ())})"
            )
        if before.reset_target is None:
            raise BmcError(f"{self.endpoint.label}: {before.path} has no {rf.RESET_ACTION} action")
        request(self.endpoint, self.creds, "POST", before.reset_target, {"ResetType": reset_type})
        return ResetDone(before, reset_type)

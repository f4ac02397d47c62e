"""A node's ComputerSystem through Redfish: find it, read its power and boot override, reset it,
set its boot override.

Invariants: the system is the spec's ``system_id`` or else the only member of the Systems
collection (several, or none, is an error naming them); a reset sends the first ResetType of
:data:`~gpuforge.bmc.redfish_facts.RESET_TYPES` that the system advertises in
``ResetType@Redfish.AllowableValues`` (any, in that order, when it lists none) to the action's own
``target``; an action already done (``on`` of a system that is On) sends nothing. A boot override
is one PATCH of the system (``If-Match`` its ETag when it sent one), never of a target or an
enabled value the system does not list as allowed, and nothing when it is already as asked; the
system is read again after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuforge.bmc import redfish_facts as rf
from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.bmc.transport import BmcError, Credentials, Endpoint, exchange, request


@dataclass(frozen=True)
class SystemState:
    """What a ComputerSystem resource says about power and boot."""

    path: str
    power_state: str | None
    boot_target: str | None
    boot_enabled: str | None
    reset_target: str | None
    allowable: tuple[str, ...] | None
    boot_targets: tuple[str, ...] | None = None  # BootSourceOverrideTarget@Redfish.AllowableValues
    boot_enabled_values: tuple[str, ...] | None = None  # BootSourceOverrideEnabled@Redfish.AllowableValues
    boot_mode: str | None = None
    etag: str | None = None


@dataclass(frozen=True)
class ResetDone:
    """What an action did: the ResetType sent (None: nothing, the system was already there)."""

    before: SystemState
    reset_type: str | None


@dataclass(frozen=True)
class BootDone:
    """What a boot override request did: what was sent ("Pxe (Once)"; None: nothing, it was already
    so) and the state read back after it (``before`` when nothing was sent)."""

    before: SystemState
    sent: str | None
    after: SystemState


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _texts(value: Any) -> tuple[str, ...] | None:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else None


def parse_system(path: str, body: Any, etag: str | None = None) -> SystemState:
    """A ComputerSystem resource's power, boot override (with what it allows) and reset action."""
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    boot = _object(body.get(rf.BOOT))
    reset = _object(_object(body.get("Actions")).get(rf.RESET_ACTION))
    return SystemState(
        path=path,
        power_state=_text(body.get(rf.POWER_STATE)),
        boot_target=_text(boot.get(rf.BOOT_TARGET)),
        boot_enabled=_text(boot.get(rf.BOOT_ENABLED)),
        reset_target=_text(reset.get("target")),
        allowable=_texts(reset.get(rf.ALLOWABLE)),
        boot_targets=_texts(boot.get(rf.BOOT_TARGETS_ALLOWED)),
        boot_enabled_values=_texts(boot.get(rf.BOOT_ENABLED_ALLOWED)),
        boot_mode=_text(boot.get(rf.BOOT_MODE)),
        etag=etag,
    )


def boot_patch(state: SystemState, target: BootTarget, persistent: bool) -> dict[str, Any] | None:
    """The PATCH body that sets the override (None: it is already so); ValueError when the system
    does not allow the target or the enabled value. ``none`` is target None, enabled Disabled; the
    system's BootSourceOverrideMode, when it shows one, is sent back unchanged."""
    source = rf.BOOT_SOURCE[target]
    if target is BootTarget.NONE:
        if state.boot_enabled == rf.ENABLED_DISABLED or state.boot_target == source:
            return None
        enabled = rf.ENABLED_DISABLED
    else:
        enabled = rf.ENABLED_CONTINUOUS if persistent else rf.ENABLED_ONCE
        if (state.boot_target, state.boot_enabled) == (source, enabled):
            return None
    for name, value, allowed in (
        (rf.BOOT_TARGET, source, state.boot_targets),
        (rf.BOOT_ENABLED, enabled, state.boot_enabled_values),
    ):
        if allowed is not None and value not in allowed:
            raise ValueError(f"it does not allow {name} {value} (it allows {', '.join(allowed) or 'none'})")
    boot = {rf.BOOT_TARGET: source, rf.BOOT_ENABLED: enabled}
    if state.boot_mode is not None:
        boot[rf.BOOT_MODE] = state.boot_mode
    return {rf.BOOT: boot}


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
            return parse_system(path, *exchange(self.endpoint, self.creds, "GET", path))
        except ValueError as e:
            raise BmcError(f"{self.endpoint.label}: {path}: {e}") from None

    def set_boot(self, target: BootTarget, persistent: bool) -> BootDone:
        """Set the boot override (one PATCH, nothing when it is already so) and read it back."""
        before = self.state()
        try:
            body = boot_patch(before, target, persistent)
        except ValueError as e:
            raise BmcError(f"{self.endpoint.label}: {before.path}: {e}") from None
        if body is None:
            return BootDone(before, None, before)
        exchange(self.endpoint, self.creds, "PATCH", before.path, body, if_match=before.etag)
        boot = body[rf.BOOT]
        return BootDone(before, f"{boot[rf.BOOT_TARGET]} ({boot[rf.BOOT_ENABLED]})", self.state())

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

"""systemd readings: state of several units in one ``systemctl show`` call."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypedDict

from gpuforge.probes._common import as_name_list, parse_marker, quote_all, to_int
from gpuforge.probes.reading import Reading

UNIT_PROPERTIES: tuple[str, ...] = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "NeedDaemonReload",
)

UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9@_.:\\-]+$")


class UnitState(TypedDict):
    """Selected properties of one unit (``LoadState`` is ``not-found`` for unknown units)."""

    Id: str | None
    LoadState: str | None
    ActiveState: str | None
    SubState: str | None
    UnitFileState: str | None
    MainPID: int | None
    NeedDaemonReload: bool
    """The unit's file (or a drop-in) changed on disk since systemd loaded it (``daemon-reload`` owed)."""


class UnitStatesInfo(TypedDict):
    """What :data:`UNIT_STATES` reads; ``units`` maps each requested name to its state or None."""

    error: str | None
    units: dict[str, UnitState | None]


def _unit_state(props: dict[str, str]) -> UnitState:
    return UnitState(
        Id=props.get("Id") or None,
        LoadState=props.get("LoadState") or None,
        ActiveState=props.get("ActiveState") or None,
        SubState=props.get("SubState") or None,
        UnitFileState=props.get("UnitFileState") or None,
        MainPID=to_int(props.get("MainPID")),
        NeedDaemonReload=props.get("NeedDaemonReload") == "yes",
    )


def parse_systemctl_show(lines: list[str]) -> UnitStatesInfo:
    """Parse ``systemctl show -p ... u1 u2 ...``: one blank-line separated block per unit, in order.

    The ``__units=`` marker carries the requested names; ``__rc=`` the exit status.
    """
    requested: list[str] = []
    rc: int | None = None
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    other: list[str] = []
    for line in lines:
        marker = parse_marker(line)
        if marker is not None:
            if marker[0] == "units":
                requested = marker[1].split()
            elif marker[0] == "rc":
                rc = to_int(marker[1])
            continue
        if not line.strip():
            current = None
            continue
        key, sep, value = line.partition("=")
        if sep and key in UNIT_PROPERTIES:
            if current is None or key in current:
                current = {}
                blocks.append(current)
            current[key] = value.strip()
        else:
            other.append(line.strip())
    units: dict[str, UnitState | None] = {}
    for position, name in enumerate(requested):
        units[name] = _unit_state(blocks[position]) if position < len(blocks) else None
    error: str | None = None
    if len(blocks) < len(requested) or (rc not in (None, 0) and not blocks):
        error = "; ".join(other) or f"systemctl exited with status {rc}"
    return UnitStatesInfo(error=error, units=units)


def unit_states_command(units: Sequence[str] | str) -> str:
    """The shell command whose output ``parse_systemctl_show`` reads."""
    names = as_name_list(units, "unit name", UNIT_NAME_RE)
    return (
        f"echo '__units={' '.join(names)}'; "
        f"systemctl show -p {','.join(UNIT_PROPERTIES)} {quote_all(names)} 2>&1; "
        'echo "__rc=$?"'
    )


UNIT_STATES: Reading[UnitStatesInfo] = Reading("systemd.unit_states", unit_states_command, parse_systemctl_show)

"""Which distribution release and CPU architecture a node runs (stdlib only).

``/etc/os-release`` (os-release(5): ``ID`` and ``VERSION_ID``) and ``uname -m``, read in one
command; the validator compares them with the node's row of the platform table
(``gpuforge.spec.platforms``), and the deploy's driver layer refuses a node whose ``uname -m`` is
not its group's ``arch``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.probes.reading import Reading

MACHINE_SECTION = "__section=machine"


@dataclass
class PlatformInfo:
    """What the node says it runs; None where it could not be read."""

    os_id: str | None
    version_id: str | None
    machine: str | None


def os_release_command() -> str:
    return f"cat /etc/os-release 2>/dev/null; echo {MACHINE_SECTION}; uname -m"


def _value(raw: str) -> str:
    """An os-release value: shell-quoted or bare (os-release(5)); quotes removed."""
    value = raw.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value


def parse_os_release(lines: list[str]) -> PlatformInfo:
    """``ID``/``VERSION_ID`` from the os-release lines, the machine from the line after the marker."""
    fields: dict[str, str] = {}
    machine = None
    in_machine = False
    for line in lines:
        if line.strip() == MACHINE_SECTION:
            in_machine = True
        elif in_machine:
            machine = machine or (line.strip() or None)
        elif "=" in line and not line.lstrip().startswith("#"):
            key, raw = line.split("=", 1)
            fields[key.strip()] = _value(raw)
    return PlatformInfo(fields.get("ID") or None, fields.get("VERSION_ID") or None, machine)


def runs(info: PlatformInfo, os_id: str, version_id: str) -> bool:
    """The node's os-release is ``os_id`` at ``version_id`` (a point release counts: ``9.4`` is ``9``)."""
    have = info.version_id
    return info.os_id == os_id and have is not None and (have == version_id or have.startswith(version_id + "."))


OS_RELEASE: Reading[PlatformInfo] = Reading("platform.os_release", os_release_command, parse_os_release)

"""Which Slurm a node has installed (``<binary> -V``) and which its daemons run (what they report).

Installed: ``sinfo``, ``slurmd``, ``slurmctld`` and ``slurmdbd -V`` print ``slurm 24.11.5`` (Debian's
build ``slurm-wlm 22.05.8``). Running: ``scontrol show slurmd`` asks this node's slurmd, which answers
``Version = <its version>``; on a node that has slurmctld, ``scontrol show config`` asks the controller
in control, which answers ``SLURM_VERSION = <its version>``, followed by one ``Slurmctld(primary) at
<host> is UP`` line per controller in slurm.conf's order (the client asks them in that order, so the
first one up answered). The formats, the same at every release from 22.05 to 26.05, are cited in
``gpuforge.validator.cluster_slurm_version.SOURCES``.

What a node prints is untrusted: each command's output is cut to a few short lines on the node, and
only a version that matches :data:`VERSION` (digits, dots and a short suffix such as ``-0rc1``) and a
host name of :data:`HOST` are kept; anything else is dropped, never echoed.
"""

from __future__ import annotations

import re
from typing import TypedDict

from gpuforge.probes._common import parse_marker
from gpuforge.probes.reading import Reading

#: A Slurm version as Slurm prints it (``SLURM_VERSION_STRING``: ``22.05.8``, ``24.05.0-0rc1``).
VERSION = re.compile(r"\d{2}\.\d{2}\.\d{1,3}(?:-[0-9A-Za-z.+~]{1,32})?")
#: A controller's name in slurm.conf (``SlurmctldHost``) as the ping lines print it.
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_V = VERSION.pattern
#: ``<binary> -V`` (``print_slurm_version``: ``"%s %s\n", PACKAGE_NAME, SLURM_VERSION_STRING``).
INSTALLED_LINE = re.compile(rf"slurm(?:-wlm)? (?P<v>{_V})")
#: ``scontrol show slurmd`` (``slurm_print_slurmd_status``: ``"Version                  = %s\n"``).
SLURMD_LINE = re.compile(rf"Version\s+= (?P<v>{_V})")
#: ``scontrol show config`` (``slurm_print_key_pairs``: ``"%-23s = %s\n"`` of ``SLURM_VERSION``).
CTLD_LINE = re.compile(rf"SLURM_VERSION\s+= (?P<v>{_V})")
#: ``scontrol show config``'s ping lines (``"Slurmctld(%s) at %s is %s\n"``).
PING_LINE = re.compile(rf"Slurmctld\((?:primary|backup\d*)\) at (?P<host>{HOST.pattern}) is (?P<state>UP|DOWN)")

BINARIES = ("sinfo", "slurmd", "slurmctld", "slurmdbd")
#: Seconds each ``scontrol`` query may take on the node (a daemon that does not answer: nothing read).
QUERY_TIMEOUT_S = 10
#: Lines and characters kept of each command's output on the node.
KEEP_LINES, KEEP_CHARS = 8, 200


class SlurmVersionInfo(TypedDict):
    """Installed versions (``-V``) by binary, and the versions the daemons report by daemon.

    ``version``: the client's, else slurmd's (None: neither installed). ``running`` holds ``slurmd``
    (this node's) and ``slurmctld`` (the one in control: ``slurmctld_from``, the first controller up;
    None when none answered).
    """

    version: str | None
    installed: dict[str, str]
    running: dict[str, str]
    slurmctld_from: str | None


def _kept(command: str, pattern: str) -> str:
    """``command``'s stderr and stdout, only the lines matching ``pattern``, bounded."""
    return f"{command} 2>&1 | grep -E '{pattern}' | head -n {KEEP_LINES} | cut -c 1-{KEEP_CHARS}"


def slurm_version_command() -> str:
    """``__bin=<binary>`` and its ``-V`` line per installed binary; ``__running=slurmd`` and
    ``__running=slurmctld`` and what those daemons answered. Always exits 0."""
    q = f"timeout {QUERY_TIMEOUT_S} scontrol show"
    return (
        f"for b in {' '.join(BINARIES)}; do if command -v $b >/dev/null 2>&1; "
        f'then echo "__bin=$b"; {_kept("$b -V", "^slurm")}; fi; done; '
        "if command -v scontrol >/dev/null 2>&1; then "
        f"if command -v slurmd >/dev/null 2>&1; then echo __running=slurmd; {_kept(f'{q} slurmd', '^Version ')}; fi; "
        "if command -v slurmctld >/dev/null 2>&1; then echo __running=slurmctld; "
        f"{_kept(f'{q} config', '^SLURM_VERSION |^Slurmctld[(]')}; fi; "
        'fi; echo "__done=1"'
    )


def _version(pattern: re.Pattern[str], line: str) -> str | None:
    m = pattern.fullmatch(line.strip())
    return m.group("v") if m else None


def parse_slurm_version(lines: list[str]) -> SlurmVersionInfo:
    """Parse :func:`slurm_version_command`'s output (total: unknown lines are dropped)."""
    info = SlurmVersionInfo(version=None, installed={}, running={}, slurmctld_from=None)
    section: tuple[str, str] | None = None  # ("bin", binary) or ("running", daemon)
    for line in lines:
        marker = parse_marker(line)
        if marker is not None:
            section = marker if marker[0] in ("bin", "running") else section
            continue
        if section is None:
            continue
        kind, name = section
        if kind == "bin" and name in BINARIES:
            _keep_first(info["installed"], name, _version(INSTALLED_LINE, line))
        elif kind == "running" and name == "slurmd":
            _keep_first(info["running"], name, _version(SLURMD_LINE, line))
        elif kind == "running" and name == "slurmctld":
            _keep_first(info["running"], name, _version(CTLD_LINE, line))
            ping = PING_LINE.fullmatch(line.strip())
            if ping and ping.group("state") == "UP" and info["slurmctld_from"] is None:
                info["slurmctld_from"] = ping.group("host")
    info["version"] = info["installed"].get("sinfo") or info["installed"].get("slurmd")
    return info


def _keep_first(into: dict[str, str], name: str, version: str | None) -> None:
    if version is not None and name not in into:
        into[name] = version


SLURM_VERSION: Reading[SlurmVersionInfo] = Reading(
    "slurm.version", slurm_version_command, parse_slurm_version, timeout_s=2 * QUERY_TIMEOUT_S + 10.0
)

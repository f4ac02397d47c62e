"""One round trip per layer: packages, files, units, accounts and chosen file contents.

Composes the commands and parsers of the small readings (packages, files, systemd) so that
a layer's whole state on a host costs a single SSH command (and, merged by
``gpuforge.deploy.fact_prefetch``, all of a node's layers cost one while a run changes
nothing). A ``read_paths`` entry may also be a :class:`CommandRead`: the output of a
read-only command (the live state of a helm release), read in the same round trip as the files.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Sequence
from typing import Any

from gpuforge.deploy.apt import DPKG_INTERRUPTED
from gpuforge.deploy.converge import PENDING_DIR, LayerFacts, package_name
from gpuforge.deploy.facts.adapter import reading_fact
from gpuforge.deploy.package_manager import manager_of
from gpuforge.probes.files import file_digests_command, parse_file_digests
from gpuforge.probes.packages import parse_dpkg_query
from gpuforge.probes.reading import Reading
from gpuforge.probes.systemd import parse_systemctl_show, unit_states_command

SECTIONS = ("packages", "files", "units", "accounts", "contents", "dpkg", "pending")


class CommandRead(str):
    """A ``read_paths`` entry that reads a command's standard output instead of a file.

    The string itself is the key the output is found under in ``LayerFacts.contents`` (None when
    the command prints nothing, e.g. it fails); ``command`` is the read-only shell command. Keys
    are plain words (letters, digits, ``_./:-``): they are echoed unquoted beside the output.
    """

    command: str

    def __new__(cls, key: str, command: str) -> CommandRead:
        if not re.fullmatch(r"[A-Za-z0-9_./:-]+", key):
            raise ValueError(f"command read key {key!r}: letters, digits and _./:- only")
        read = super().__new__(cls, key)
        read.command = command
        return read

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]
        """``copy``, ``deepcopy`` and ``pickle`` call ``__new__`` with these (key and command)."""
        return str(self), self.command


def _read_content(p: str) -> str:
    if isinstance(p, CommandRead):
        return f'echo "{p}=$({{ {p.command}; }} 2>/dev/null | base64 -w0)"'
    return f'echo "{p}=$(base64 -w0 {shlex.quote(p)} 2>/dev/null || echo -)"'


def _section(name: str) -> str:
    return f"echo '__section={name}'"


def layer_state_command(
    packages: Sequence[str],
    paths: Sequence[str],
    units: Sequence[str],
    accounts: Sequence[str],
    read_paths: Sequence[str],
    rpm: bool = False,
) -> str:
    parts = []
    if packages:
        parts += [_section("packages"), manager_of(rpm).query([package_name(p) for p in packages])]
    if packages and not rpm:
        # An interrupted dpkg run (killed, power loss) must be repaired before anything installs.
        parts += [_section("dpkg"), f"if {DPKG_INTERRUPTED}; then echo interrupted; fi"]
    if paths:
        parts += [_section("files"), file_digests_command(list(paths))]
    if units:
        parts += [_section("units"), unit_states_command(list(units))]
        # Restarts and reloads an interrupted run still owes (see gpuforge.deploy.converge.PENDING_DIR).
        parts += [_section("pending"), f"ls -1 {PENDING_DIR} 2>/dev/null || true"]
    if accounts:
        parts += [_section("accounts")]
        parts += [f'echo "{a}=$(id -u {shlex.quote(a)} 2>/dev/null)"' for a in accounts]
    if read_paths:
        parts += [_section("contents")]
        parts += [_read_content(p) for p in read_paths]
    return "; ".join(parts) or "true"


def parse_layer_state(lines: list[str]) -> LayerFacts:
    buckets: dict[str, list[str]] = {s: [] for s in SECTIONS}
    current = None
    for line in lines:
        if line.startswith("__section="):
            current = line.split("=", 1)[1].strip()
            continue
        if current in buckets:
            buckets[current].append(line)
    facts = LayerFacts()
    if buckets["packages"]:
        facts.packages = parse_dpkg_query(buckets["packages"])
    if buckets["files"]:
        facts.files = {k: dict(v) if v else None for k, v in parse_file_digests(buckets["files"]).items()}
    if buckets["units"]:
        units: dict[str, Any] = parse_systemctl_show(buckets["units"])["units"]
        facts.units = {k: dict(v) if v else None for k, v in units.items()}
    facts.pending = {line.strip() for line in buckets["pending"] if line.strip()}
    facts.dpkg_interrupted = any(line.strip() == "interrupted" for line in buckets["dpkg"])
    for line in buckets["accounts"]:
        name, _, uid = line.partition("=")
        facts.accounts[name] = int(uid) if uid.strip().isdigit() else None
    for line in buckets["contents"]:
        path, _, data = line.partition("=")
        facts.contents[path] = None if data.strip() in ("", "-") else base64.b64decode(data).decode(errors="replace")
    return facts


#: Everything ``plan_layer`` needs to know about a host, in one command.
LAYER_STATE: Reading[LayerFacts] = Reading("deploy.layer_state", layer_state_command, parse_layer_state)
LayerState = reading_fact(LAYER_STATE)

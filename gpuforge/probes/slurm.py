"""Slurm readings: node and partition state, accounting entities, node hardware, and the node checks'
munge round trip and ``srun --help`` (versions: :mod:`gpuforge.probes.slurm_version`)."""

from __future__ import annotations

import re
from typing import TypedDict

from gpuforge.probes._common import CommandOutput, guarded, parse_marker, split_guarded, to_int
from gpuforge.probes.reading import Reading

#: Suffix flags sinfo appends to node states (``man sinfo``, NODE STATE CODES).
SINFO_STATE_FLAGS: dict[str, str] = {
    "*": "not_responding",
    "~": "powered_off",
    "#": "powering_up",
    "!": "pending_power_down",
    "%": "powering_down",
    "$": "maintenance",
    "@": "pending_reboot",
    "^": "reboot_issued",
    "-": "planned",
}


class SlurmCommandStatus(TypedDict):
    """How a Slurm client command went."""

    available: bool
    rc: int | None
    error: str | None
    messages: list[str]


def _status(available: bool, rc: int | None, messages: list[str], binary: str) -> SlurmCommandStatus:
    error: str | None = None
    if not available:
        error = f"{binary} not found (Slurm client not installed)"
    elif rc not in (None, 0):
        error = "; ".join(messages) or f"{binary} exited with status {rc}"
    return SlurmCommandStatus(available=available, rc=rc, error=error, messages=messages)


def split_slurm_state(raw: str) -> tuple[str, list[str]]:
    """Split a node state into base state and flags.

    ``idle*`` -> ("idle", ["not_responding"]); ``IDLE+DRAIN`` -> ("idle", ["drain"]);
    ``DOWN*+DRAIN`` -> ("down", ["not_responding", "drain"]); ``mixed-`` -> ("mixed", ["planned"]).
    """
    parts = raw.strip().split("+")
    flags: list[str] = []
    base = ""
    for position, part in enumerate(parts):
        word = part
        symbols: list[str] = []
        while word and word[-1] in SINFO_STATE_FLAGS:
            symbols.insert(0, SINFO_STATE_FLAGS[word[-1]])
            word = word[:-1]
        if position == 0:
            base = word.lower()
            flags.extend(symbols)
        else:
            flags.extend(symbols)
            if word:
                flags.append(word.lower())
    return base, flags


def split_gres(gres: str) -> list[str]:
    """Split a GRES string on commas outside parentheses; ``(null)`` -> []."""
    gres = gres.strip()
    if gres in {"", "(null)", "N/A"}:
        return []
    items: list[str] = []
    depth = 0
    current = ""
    for char in gres:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip() for item in items if item.strip()]


# --------------------------------------------------------------------------- sinfo


class SinfoNode(TypedDict):
    """One node as seen by ``sinfo -N``."""

    state: str
    flags: list[str]
    raw_state: str
    partitions: list[str]
    default_partition: str | None
    gres: list[str]


class SinfoInfo(SlurmCommandStatus):
    """What :data:`SINFO_NODES` reads."""

    nodes: dict[str, SinfoNode]


SINFO_FORMAT = "%n|%T|%P|%G"


def parse_sinfo_nodes(lines: list[str]) -> SinfoInfo:
    """Parse ``sinfo -h -N -o '%n|%T|%P|%G'`` (one line per node and partition)."""
    out = split_guarded(lines)
    nodes: dict[str, SinfoNode] = {}
    messages: list[str] = []
    for line in out.lines:
        parts = line.strip().split("|")
        if len(parts) != 4 or not parts[0]:
            if line.strip():
                messages.append(line.strip())
            continue
        name, raw_state, partition, gres = parts
        state, flags = split_slurm_state(raw_state)
        node = nodes.setdefault(
            name,
            SinfoNode(state=state, flags=flags, raw_state=raw_state, partitions=[], default_partition=None, gres=[]),
        )
        is_default = partition.endswith("*")
        partition = partition.rstrip("*")
        if partition and partition not in node["partitions"]:
            node["partitions"].append(partition)
        if is_default:
            node["default_partition"] = partition
        for item in split_gres(gres):
            if item not in node["gres"]:
                node["gres"].append(item)
    return SinfoInfo(**_status(out.available, out.rc, messages, "sinfo"), nodes=nodes)


# --------------------------------------------------------------------------- scontrol show node/partition

_KEY_RE = re.compile(r"(?:(?<=\s)|^)(?P<key>[A-Za-z][A-Za-z0-9_]*)=")

#: Keys that may follow ``Reason=`` on the same record; anything else after it is reason text.
_AFTER_REASON_KEYS = frozenset({"Comment", "Extra", "InstanceId", "InstanceType"})


def parse_scontrol_record(text: str) -> dict[str, str]:
    """Parse one ``Key=value Key=value ...`` record; values may contain spaces.

    A value runs until the next `` Key=``. ``Reason=`` is free text that may contain spaces
    and ``=``: it runs to the end of the record unless a known trailing key follows.
    """
    text = text.strip()
    matches = list(_KEY_RE.finditer(text))
    record: dict[str, str] = {}
    index = 0
    while index < len(matches):
        match = matches[index]
        key = match.group("key")
        end_index = index + 1
        if key == "Reason":
            while end_index < len(matches) and matches[end_index].group("key") not in _AFTER_REASON_KEYS:
                end_index += 1
        end = matches[end_index].start() if end_index < len(matches) else len(text)
        record[key] = text[match.end() : end].strip()
        index = end_index
    return record


def parse_scontrol_records(lines: list[str], record_key: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Group ``scontrol show <entity>`` output into records keyed by ``record_key``'s value.

    Accepts the one-line ``-o`` form and the default multi-line form (continuation lines indented).
    Lines that belong to no record (errors) are returned separately.
    """
    records: list[str] = []
    stray: list[str] = []
    for line in lines:
        if line.startswith(f"{record_key}="):
            records.append(line.strip())
        elif line.strip() and records and line[:1].isspace():
            records[-1] += " " + line.strip()
        elif line.strip():
            stray.append(line.strip())
    parsed: dict[str, dict[str, str]] = {}
    for text in records:
        record = parse_scontrol_record(text)
        parsed[record.get(record_key, "")] = record
    return parsed, stray


class ScontrolNodeInfo(SlurmCommandStatus):
    """What :data:`SCONTROL_NODES` reads."""

    nodes: dict[str, dict[str, str]]


class ScontrolPartitionInfo(SlurmCommandStatus):
    """What :data:`SCONTROL_PARTITIONS` reads."""

    partitions: dict[str, dict[str, str]]


def parse_scontrol_nodes(lines: list[str]) -> ScontrolNodeInfo:
    """Parse ``scontrol show node -o`` into ``{NodeName: {Key: value}}``."""
    out = split_guarded(lines)
    nodes, stray = parse_scontrol_records(out.lines, "NodeName")
    return ScontrolNodeInfo(**_status(out.available, out.rc, stray, "scontrol"), nodes=nodes)


def parse_scontrol_partitions(lines: list[str]) -> ScontrolPartitionInfo:
    """Parse ``scontrol show partition -o`` into ``{PartitionName: {Key: value}}``."""
    out = split_guarded(lines)
    partitions, stray = parse_scontrol_records(out.lines, "PartitionName")
    return ScontrolPartitionInfo(**_status(out.available, out.rc, stray, "scontrol"), partitions=partitions)


# --------------------------------------------------------------------------- sacctmgr

#: Entity -> (sacctmgr entity, format fields). Field names become the dict keys.
SACCTMGR_QUERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "qos": ("qos", ("Name", "Priority", "Preempt", "PreemptMode", "GrpTRES", "MaxTRESPerUser")),
    "account": ("account", ("Account", "Description", "Organization")),
    "assoc": ("assoc", ("Cluster", "Account", "User", "Share", "QOS", "DefaultQOS")),
}


class SacctmgrInfo(TypedDict):
    """What :data:`SACCTMGR` reads."""

    available: bool
    error: str | None
    rc: dict[str, int | None]
    messages: list[str]
    qos: list[dict[str, str]]
    account: list[dict[str, str]]
    assoc: list[dict[str, str]]


def parse_sacctmgr(lines: list[str]) -> SacctmgrInfo:
    """Parse the sectioned ``sacctmgr -nP show qos|account|assoc format=...`` output."""
    info = SacctmgrInfo(available=True, error=None, rc={}, messages=[], qos=[], account=[], assoc=[])
    missing: str | None = None
    section: str | None = None
    for line in lines:
        marker = parse_marker(line)
        if marker is not None:
            key, value = marker
            if key == "missing":
                missing = value
            elif key == "section" and value in SACCTMGR_QUERIES:
                section = value
            elif key == "rc" and section is not None:
                info["rc"][section] = to_int(value)
            continue
        if section is None or not line.strip():
            continue
        fields = SACCTMGR_QUERIES[section][1]
        cells = line.split("|")
        if len(cells) != len(fields):
            info["messages"].append(line.strip())
            continue
        row = dict(zip(fields, cells, strict=True))
        if section == "qos":
            info["qos"].append(row)
        elif section == "account":
            info["account"].append(row)
        else:
            info["assoc"].append(row)
    info["available"] = missing is None
    if not info["available"]:
        info["error"] = "sacctmgr not found (Slurm client not installed)"
    elif any(rc not in (None, 0) for rc in info["rc"].values()):
        failed = sorted(name for name, rc in info["rc"].items() if rc not in (None, 0))
        detail = "; ".join(info["messages"])
        info["error"] = f"sacctmgr failed for {', '.join(failed)}" + (f": {detail}" if detail else "")
    return info


# --------------------------------------------------------------------------- slurmd -C


class SlurmdHardwareInfo(SlurmCommandStatus):
    """What :data:`SLURMD_HARDWARE` reads: ``hardware`` holds NodeName, CPUs, Boards, ... as reported."""

    hardware: dict[str, str | int]


_SLURMD_INT_KEYS = frozenset(
    {"CPUs", "Boards", "SocketsPerBoard", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory", "TmpDisk"}
)


def parse_slurmd_c(lines: list[str]) -> SlurmdHardwareInfo:
    """Parse ``slurmd -C`` (``NodeName=... CPUs=... RealMemory=...`` and ``UpTime=...``)."""
    out = split_guarded(lines)
    hardware: dict[str, str | int] = {}
    messages: list[str] = []
    for line in out.lines:
        tokens = line.split()
        pairs = [token.split("=", 1) for token in tokens if "=" in token]
        if not tokens or len(pairs) != len(tokens):
            if line.strip():
                messages.append(line.strip())
            continue
        for key, value in pairs:
            number = to_int(value) if key in _SLURMD_INT_KEYS else None
            hardware[key] = number if number is not None else value
    return SlurmdHardwareInfo(**_status(out.available, out.rc, messages, "slurmd"), hardware=hardware)


# --------------------------------------------------------------------------- readings

_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9._-]*$")


def scontrol_nodes_command(node: str = "") -> str:
    """``scontrol show node -o``: every node, or only ``node``."""
    if not _NODE_NAME_RE.match(node):
        raise ValueError(f"invalid node name: {node!r}")
    return guarded("scontrol", f"scontrol show node -o{f' {node}' if node else ''}")


def sacctmgr_command() -> str:
    """QOS, accounts and associations in one round trip (three ``sacctmgr`` calls, sectioned)."""
    parts = [
        f"echo '__section={section}'; sacctmgr -nP show {entity} format={','.join(fields)} 2>&1; echo \"__rc=$?\""
        for section, (entity, fields) in SACCTMGR_QUERIES.items()
    ]
    return "if command -v sacctmgr >/dev/null 2>&1; then " + "; ".join(parts) + "; else echo '__missing=sacctmgr'; fi"


SINFO_NODES: Reading[SinfoInfo] = Reading(
    "slurm.sinfo_nodes", lambda: guarded("sinfo", f"sinfo -h -N -o '{SINFO_FORMAT}'"), parse_sinfo_nodes, timeout_s=15.0
)
SCONTROL_NODES: Reading[ScontrolNodeInfo] = Reading(
    "slurm.scontrol_nodes", scontrol_nodes_command, parse_scontrol_nodes, timeout_s=15.0
)
SCONTROL_PARTITIONS: Reading[ScontrolPartitionInfo] = Reading(
    "slurm.scontrol_partitions",
    lambda: guarded("scontrol", "scontrol show partition -o"),
    parse_scontrol_partitions,
    timeout_s=15.0,
)
SACCTMGR: Reading[SacctmgrInfo] = Reading("slurm.sacctmgr", sacctmgr_command, parse_sacctmgr, timeout_s=30.0)
SLURMD_HARDWARE: Reading[SlurmdHardwareInfo] = Reading(
    "slurm.slurmd_hardware", lambda: guarded("slurmd", "slurmd -C"), parse_slurmd_c
)
#: A munge credential encoded and decoded on this node: ``ok`` when munged works with its key.
MUNGE_ROUND_TRIP: Reading[CommandOutput] = Reading(
    "slurm.munge_round_trip", lambda: guarded("munge", "munge -n | unmunge"), split_guarded
)
#: ``srun --help``: with pyxis loaded it lists ``--container-image``.
SRUN_HELP: Reading[CommandOutput] = Reading("slurm.srun_help", lambda: guarded("srun", "srun --help"), split_guarded)

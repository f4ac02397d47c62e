"""What one spec file may ask for: every input limit in one table, each with its reason.

A spec over a limit is refused as a :class:`~gpuforge.spec.errors.SpecError` (``gpuforge check``
exits 2) whose message names the limit. Each check runs before the work it bounds, so a refusal
costs no more than reading the file up to that point: the file's size before reading it, the
YAML's depth, aliases and values while parsing, the hostlists' sizes before expanding any of
them, and the account and partition counts before validating a field. ``docs/spec-reference.md``
lists this table (``gpuforge schema --markdown`` writes it from :data:`LIMITS`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """One limit: how much of ``what`` a spec may hold, and why that number."""

    what: str
    """What is counted, as the refusal names it (plural noun)."""
    value: int
    reason: str

    def refusal(self, found: int | None = None) -> str:
        """The message of a refused spec: how many were found (None: counting stopped past the
        limit), and this limit."""
        if found is None:
            return f"refused: more than {self.value:,} {self.what}, the limit (docs/spec-reference.md, Limits)"
        return f"refused: {found:,} {self.what}; the limit is {self.value:,} (docs/spec-reference.md, Limits)"


FILE_BYTES = Limit(
    "bytes in the spec file",
    2**20,
    "a 10,000-node spec that lists every node's address and describes 2,000 accounts in full is about "
    "0.55 MiB; only a regular file is read, and its size is checked before a byte is",
)
TEXT_CHARS = Limit(
    "characters in one YAML value",
    4096,
    "the longest any field takes (a path); below the 4,300 digits Python turns into a number, so no "
    "digit string in any value can stop a check with a traceback",
)
NUMBER_DIGITS = Limit(
    "digits in one number",
    18,
    "every count, size, port and ID fits (a 64-bit integer holds any 18-digit number); counts YAML "
    "integers and hostlist range bounds",
)
YAML_DEPTH = Limit(
    "levels of YAML nesting",
    64,
    "the spec nests 7 levels and site Ansible variables 8 more; parsing and validating recurse once per level",
)
YAML_ALIASES = Limit(
    "YAML aliases (`*name`)",
    256,
    "anchors share blocks such as a hardware description between groups; each alias can multiply "
    "what the file expands to",
)
YAML_VALUES = Limit(
    "YAML values once aliases are expanded",
    60_000,
    "the 10,000-node spec above holds about 52,000 (keys count); each value is parsed, built and "
    "validated, which bounds a check's time: 60,000 take well under a second (a 'billion laughs' "
    "file of a few hundred bytes is refused)",
)
NODES = Limit(
    "nodes",
    10_000,
    "every node's name, address and role is resolved on each check and is a host of every run; a "
    "1,024-node spec checks and renders in well under a second (bench/render_scale.py), 10,000 check in "
    "well under a second too. Counted from the node groups' hostlists before any is expanded",
)
HOSTLIST_NAMES = Limit(
    "host names named by hostlists and partitions together",
    100_000,
    "node groups, leaf-switch maps and partitions each name nodes; ten times the node limit leaves "
    "room for a partition per group, several whole-cluster partitions and a switch map",
)
ACCOUNTS = Limit(
    "Slurm accounts",
    5000,
    "a national center has a few thousand projects; each account is a sacctmgr association "
    "checked and compared on every apply",
)
PARTITIONS = Limit(
    "Slurm partitions",
    256,
    "sites run tens; each is a PartitionName line in every node's slurm.conf and expands its node list",
)

BUNDLE_MANIFEST_BYTES = Limit(
    "bytes in a bundle's manifest.json",
    64 * 2**20,
    "each file of an offline bundle is listed with its size, sha256 and source in about 300 bytes: "
    "200,000 files; the manifest is read whole, so a link to /dev/zero or a huge file is refused first",
)

LIMITS: tuple[Limit, ...] = (
    FILE_BYTES,
    TEXT_CHARS,
    NUMBER_DIGITS,
    YAML_DEPTH,
    YAML_ALIASES,
    YAML_VALUES,
    NODES,
    HOSTLIST_NAMES,
    ACCOUNTS,
    PARTITIONS,
    BUNDLE_MANIFEST_BYTES,
)


def markdown_table() -> list[str]:
    """The limits as Markdown lines (for docs/spec-reference.md)."""
    lines = ["| limit | at most | why |", "|---|---|---|"]
    lines += [f"| {limit.what} | {limit.value:,} | {limit.reason} |" for limit in LIMITS]
    return lines

"""The health check's cheap drift check: the managed files as the node has them against the list
the node's health config carries (``config_files``: path, owner, group, mode, and the sha256 of
every non-secret rendered text), read in one command with no spec and no control host.

``gpuforge validate`` runs the fuller cluster check (``config.files``, with diffs) instead.
"""

from __future__ import annotations

from typing import Any

from gpuforge.probes.files import FileDigest
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, Config, Outcome
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import MANAGED_FILES

#: Files named in a failure message (the rest are counted): Slurm keeps a reason short.
NAMED_FILES = 4


def file_problems(want: dict[str, Any], got: FileDigest | None) -> list[str]:
    """What differs between one listed file and the node's (empty: it matches)."""
    if got is None:
        return ["missing"]
    problems = []
    if got["type"] != "file":
        problems.append(f"is a {got['type']}")
    if want.get("sha256") and got["sha256"] != want["sha256"]:
        problems.append("content differs")
    mode = str(want.get("mode", "")).zfill(4)
    if got["mode"].zfill(4) != mode:
        problems.append(f"mode {got['mode'].zfill(4)} not {mode}")
    if (got["owner"], got["group"]) != (want.get("owner"), want.get("group")):
        problems.append(f"owner {got['owner']}:{got['group']} not {want.get('owner')}:{want.get('group')}")
    return problems


def drifted(listed: list[dict[str, Any]], have: dict[str, FileDigest | None]) -> list[tuple[str, list[str]]]:
    """``(path, problems)`` of every listed file that is not as listed, in list order."""
    out = []
    for want in listed:
        problems = file_problems(want, have.get(str(want["path"])))
        if problems:
            out.append((str(want["path"]), problems))
    return out


def _gate_listed(cfg: Config) -> str | None:
    if not isinstance(cfg.get("config_files"), list):
        return "the node's health config lists no managed files (rendered by an older gpuforge, or validate)"
    return None if cfg["config_files"] else "gpuforge manages no file on this node"


@check("config.files_intact", "config", CRITICAL,
       "the files gpuforge manages are as gpuforge wrote them (content, owner, mode)",
       needs=("managed_files",), gate=_gate_listed, validate=False)  # fmt: skip
def _files_intact(ctx: NodeContext) -> Outcome:
    read = ctx.read(MANAGED_FILES)
    if read["apply_running"]:
        return SKIP, "a gpuforge apply holds this node: its files may be half-way to the new spec"
    listed = [e for e in ctx.cfg["config_files"] if isinstance(e, dict) and e.get("path")]
    bad = drifted(listed, read["files"])
    if not bad:
        return PASS, f"all {len(listed)} managed files as gpuforge wrote them"
    named = "; ".join(f"{path} {', '.join(problems)}" for path, problems in bad[:NAMED_FILES])
    more = f" and {len(bad) - NAMED_FILES} more" if len(bad) > NAMED_FILES else ""
    # Short: it becomes the node's Slurm drain reason beside the other failures ('gpuforge validate'
    # shows the diffs, 'gpuforge apply' restores the files: the alert's runbook says so).
    return FAIL, f"changed by hand: {named}{more}"

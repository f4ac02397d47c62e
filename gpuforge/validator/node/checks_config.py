"""The health check's cheap drift check: the managed files as the node has them against the list
the node's health config carries (``config_files``: path, owner, group, mode, the sha256 of every
rendered text without credentials, and the ``hmac`` of every file holding them), read with no spec
and no control host.

A file holding credentials is compared by its HMAC-SHA256 under the node's own key (``hmac_key``,
root-only), computed in-process: a difference is "content differs", and no digest is ever printed.

``gpuforge validate`` runs the fuller cluster check (``config.files``, with diffs) instead.
"""

from __future__ import annotations

import hmac
from typing import Any

from gpuforge.probes.files import FileDigest, KeyedDigests
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, SKIP, Config, Outcome
from gpuforge.validator.node.framework import NodeContext, check
from gpuforge.validator.node.inputs import KEYED_FILES, MANAGED_FILES

#: Files named in a failure message (the rest are counted): Slurm keeps a reason short.
NAMED_FILES = 4


def file_problems(want: dict[str, Any], got: FileDigest | None, keyed: str | None = None) -> list[str]:
    """What differs between one listed file and the node's (empty: it matches); ``keyed``: the node's
    HMAC of the file, compared with the listed ``hmac`` in constant time."""
    if got is None:
        return ["missing"]
    problems = []
    if got["type"] != "file":
        problems.append(f"is a {got['type']}")
    plain_differs = bool(want.get("sha256")) and got["sha256"] != want["sha256"]
    keyed_differs = bool(want.get("hmac")) and not hmac.compare_digest(str(keyed or ""), str(want["hmac"]))
    if plain_differs or keyed_differs:
        problems.append("content differs")
    mode = str(want.get("mode", "")).zfill(4)
    if got["mode"].zfill(4) != mode:
        problems.append(f"mode {got['mode'].zfill(4)} not {mode}")
    if (got["owner"], got["group"]) != (want.get("owner"), want.get("group")):
        problems.append(f"owner {got['owner']}:{got['group']} not {want.get('owner')}:{want.get('group')}")
    return problems


def drifted(
    listed: list[dict[str, Any]], have: dict[str, FileDigest | None], keyed: dict[str, str | None] | None = None
) -> list[tuple[str, list[str]]]:
    """``(path, problems)`` of every listed file that is not as listed, in list order."""
    out = []
    for want in listed:
        path = str(want["path"])
        problems = file_problems(want, have.get(path), (keyed or {}).get(path))
        if problems:
            out.append((path, problems))
    return out


def keyed_digests(ctx: NodeContext, listed: list[dict[str, Any]]) -> tuple[dict[str, str | None], list[str]]:
    """The node's HMACs of the listed files that have one, and what kept them from being computed
    (the key file missing or unreadable: those files' content is then unchecked, which is a failure)."""
    if not any(e.get("hmac") for e in listed):
        return {}, []
    read: KeyedDigests = ctx.read(KEYED_FILES)
    if not read["read"]:
        key = str(ctx.cfg.get("hmac_key") or "the health key")
        return {}, [f"{key} unreadable: the content of files holding credentials is unchecked"]
    return read["digests"], []


def _gate_listed(cfg: Config) -> str | None:
    if not isinstance(cfg.get("config_files"), list):
        return "the node's health config lists no managed files (rendered by an older gpuforge, or validate)"
    return None if cfg["config_files"] else "gpuforge manages no file on this node"


@check("config.files_intact", "config", CRITICAL,
       "the files gpuforge manages are as gpuforge wrote them (content, owner, mode)",
       needs=("managed_files", "keyed_files"), gate=_gate_listed, validate=False)  # fmt: skip
def _files_intact(ctx: NodeContext) -> Outcome:
    read = ctx.read(MANAGED_FILES)
    if read["apply_running"]:
        return SKIP, "a gpuforge apply holds this node: its files may be half-way to the new spec"
    listed = [e for e in ctx.cfg["config_files"] if isinstance(e, dict) and e.get("path")]
    keyed, unkeyed = keyed_digests(ctx, listed)
    bad: list[tuple[str, list[str]]] = [(why, []) for why in unkeyed]
    bad += drifted(listed, read["files"], keyed)
    if not bad:
        return PASS, f"all {len(listed)} managed files as gpuforge wrote them"
    named = "; ".join(f"{path} {', '.join(problems)}".rstrip() for path, problems in bad[:NAMED_FILES])
    more = f" and {len(bad) - NAMED_FILES} more" if len(bad) > NAMED_FILES else ""
    # Short: it becomes the node's Slurm drain reason beside the other failures ('gpuforge validate'
    # shows the diffs, 'gpuforge apply' restores the files: the alert's runbook says so).
    return FAIL, f"changed by hand: {named}{more}"

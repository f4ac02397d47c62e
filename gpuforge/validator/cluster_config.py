"""The ``config`` layer: files on each node against what the spec renders (``config_drift``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuforge.probes.files import FILE_TEXTS, FileDigest
from gpuforge.spec.nodes import Node
from gpuforge.validator.cluster import ClusterData, cluster_check
from gpuforge.validator.config_drift import (
    Drift,
    Expected,
    add_diffs,
    compare,
    describe,
    diff_paths,
    expected_files,
    stored_secrets,
)
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, Outcome
from gpuforge.validator.node.inputs import MANAGED_FILES

CONFIG_FILES = "config.files"


@dataclass
class ConfigRead:
    """One node's managed files as read, or why they could not be read."""

    expected: list[Expected] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)
    error: str | None = None


#: Runs a shell command on a node: ``(rc, stdout, stderr)`` (the validator's transport).
Reader = Callable[[Node, str], tuple[int, str, str]]


def judge_config(data: ClusterData, node: Node, node_data: dict[str, Any], run: Reader) -> ConfigRead:
    """The managed files' digests as the node program read them (its ``data``, in the round trip of
    the node checks); the texts of drifted non-secret files in a second round trip."""
    expected = expected_files(data.spec, node, stored_secrets(data.spec))
    if not expected:
        return ConfigRead()
    have: dict[str, FileDigest | None] | None = node_data.get(MANAGED_FILES.key)
    if have is None:
        return ConfigRead(expected, error="the node program returned no digests of the managed files")
    drifts = compare(expected, have)
    wanted = diff_paths(drifts, expected)
    if wanted:
        rc, out, _ = run(node, FILE_TEXTS.command(wanted))
        if rc == 0:
            add_diffs(drifts, expected, FILE_TEXTS.parse(out.splitlines()))
    return ConfigRead(expected, drifts)


@cluster_check(CONFIG_FILES, "config", CRITICAL,
               "every file gpuforge manages matches what the spec renders (content, owner, mode)",
               depends_on=("connection.ssh",))  # fmt: skip
def config_files(data: ClusterData, node: Node) -> Outcome:
    read = data.config.get(node.name)
    if read is None:
        return FAIL, "the managed files were not read"
    if read.error:
        return FAIL, read.error
    return (FAIL if read.drifts else PASS), describe(read.drifts, len(read.expected))

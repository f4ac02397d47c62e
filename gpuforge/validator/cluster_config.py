"""The ``config`` layer: files on each node against what the spec renders (``config_drift``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuforge.probes.files import FILE_DIGESTS, FILE_TEXTS, FileDigest
from gpuforge.spec.nodes import Node
from gpuforge.validator.cluster import ClusterData, cluster_check
from gpuforge.validator.config_drift import Drift, Expected, add_diffs, compare, describe, diff_paths, expected_files
from gpuforge.validator.node.base import CRITICAL, FAIL, PASS, Outcome

CONFIG_FILES = "config.files"


@dataclass
class ConfigRead:
    """One node's managed files as read, or why they could not be read."""

    expected: list[Expected] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)
    error: str | None = None


#: Runs a shell command on a node: ``(rc, stdout, stderr)`` (the validator's transport).
Reader = Callable[[Node, str], tuple[int, str, str]]


def read_config(data: ClusterData, node: Node, run: Reader) -> ConfigRead:
    """Digests of every managed path in one round trip; the texts of drifted non-secret files in a second."""
    expected = expected_files(data.spec, node)
    if not expected:
        return ConfigRead()
    rc, out, err = run(node, FILE_DIGESTS.command([e.path for e in expected]))
    if rc != 0:
        return ConfigRead(expected, error=f"could not read the managed files' digests: {(err or out).strip()[-300:]}")
    have: dict[str, FileDigest | None] = FILE_DIGESTS.parse(out.splitlines())
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

"""A plan saved by ``gpuforge plan --out FILE`` and applied by ``gpuforge apply FILE`` (Terraform's
``plan -out`` / ``apply PLANFILE``): apply does exactly what was reviewed, or nothing.

The file (JSON, 0600, written atomically) holds the plan as ``plan --json`` prints it (secrets
redacted), what it was made with (the spec file's path, ``--limit``, ``--tags``, ``--skip-tags``)
and what proves the cluster has not moved since: the spec file's sha256, one digest per planned
node of what the plan shows for it (each step, command, diff, image state and error, all as
shown, so no secret is hashed), and one digest of the cluster-wide part (fields changed since the
last apply, Kubernetes removals, the record's state). ``apply FILE`` checks the spec file, then,
under the apply lock and before anything is touched, plans the same nodes and layers again (the
same path as apply's confirmation) and refuses when any digest differs, naming what moved.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.orchestrate.applied_record import write_private
from gpuforge.orchestrate.plan import PlanResult
from gpuforge.spec.bounded_read import InputFileError, read_regular_file
from gpuforge.spec.limits import FILE_BYTES, Limit

#: The first bytes of every plan file (how ``apply`` tells a plan file from a spec).
FORMAT = "gpuforge-plan/1"
INDENT = 1
MAGIC = json.dumps({"format": FORMAT}, indent=INDENT).removesuffix("\n}").encode()

#: The largest plan file apply reads (its own output: a 10,000-node plan with every file's diff).
PLAN_BYTES = Limit("bytes in a plan file", 2**30, "the plan of a large cluster's first apply, every diff included")

#: The cluster-wide keys of a plan's JSON (the rest is per node, under ``hosts``).
CLUSTER_KEYS = ("tags", "fields", "record_problem", "removals", "removal_problem")


class PlanFileError(Exception):
    """A plan file that cannot be used: unreadable, not a plan, or the cluster moved since."""


@dataclass(frozen=True)
class SavedPlan:
    """What ``apply FILE`` needs of a saved plan."""

    spec_path: Path
    spec_sha256: str
    limit: str | None
    tags: str | None
    skip_tags: str | None
    cluster: str
    """Digest of the cluster-wide part of the plan."""
    nodes: dict[str, str]
    """Per planned node, the digest of what the plan shows for it."""


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def digests(result: PlanResult) -> tuple[str, dict[str, str]]:
    """The cluster-wide digest and each node's, of the plan as shown (redacted)."""
    doc = result.as_dict()
    return _digest({k: doc[k] for k in CLUSTER_KEYS}), {n: _digest(h) for n, h in doc["hosts"].items()}


def file_sha256(path: Path) -> str:
    """The sha256 of the spec file (read as apply reads it: a regular file within the spec limit)."""
    try:
        return hashlib.sha256(read_regular_file(path, FILE_BYTES)).hexdigest()
    except InputFileError as e:
        raise PlanFileError(f"{path}: the plan's spec file: {e.why}") from None


def write_plan(
    out: Path, spec: tuple[Path, str], result: PlanResult, limit: str | None, tags: str | None, skip_tags: str | None
) -> None:
    """Save ``result`` to ``out``: 0600, atomically. ``spec`` is the spec file and its sha256 read
    before planning; PlanFileError (nothing written) when the file changed while the plan was made."""
    spec_path, sha256 = spec
    if file_sha256(spec_path) != sha256:
        raise PlanFileError(f"{spec_path} changed while the plan was made: not saved; plan again")
    cluster, nodes = digests(result)
    doc = {
        "format": FORMAT,
        "spec": str(spec_path.resolve()),
        "spec_sha256": sha256,
        "limit": limit,
        "tags": tags,
        "skip_tags": skip_tags,
        "digests": {"cluster": cluster, "nodes": nodes},
        "plan": result.as_dict(),
    }
    write_private(out, json.dumps(doc, indent=INDENT) + "\n")  # "format" first: MAGIC


def read_apply_input(path: Path) -> tuple[bool, bytes]:
    """``apply FILE``'s one read: (whether it is a plan ``plan --out`` wrote, its bytes). A plan starts
    with the format line and may be up to ``PLAN_BYTES``; anything else is a spec, up to ``FILE_BYTES``.
    A FIFO or a device is never waited on or read (InputFileError says what it is)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise InputFileError(f"cannot read it: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
            raise InputFileError(f"refused: {kind}, not a regular file")
        try:
            head = f.read(len(MAGIC))
            limit = PLAN_BYTES if head == MAGIC else FILE_BYTES
            if st.st_size > limit.value:
                raise InputFileError(limit.refusal(st.st_size))
            data = head + f.read(limit.value + 1 - len(head))
        except OSError as e:
            raise InputFileError(f"cannot read it: {e.strerror or e}") from None
    if len(data) > limit.value:  # it grew since fstat
        raise InputFileError(limit.refusal())
    return head == MAGIC, data


def read_plan(path: Path, data: bytes | None = None) -> SavedPlan:
    """The saved plan at ``path`` (``data``: its bytes, already read), or :class:`PlanFileError`
    saying why it cannot be used."""
    try:
        doc = json.loads(read_regular_file(path, PLAN_BYTES) if data is None else data)
        d = doc["digests"]
        plan = SavedPlan(
            Path(doc["spec"]), doc["spec_sha256"], doc["limit"], doc["tags"], doc["skip_tags"],
            d["cluster"], dict(d["nodes"]),
        )  # fmt: skip
    except InputFileError as e:
        raise PlanFileError(f"{path}: {e.why}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise PlanFileError(f"{path}: not a plan file gpuforge plan --out wrote ({type(e).__name__}: {e})") from None
    if doc.get("format") != FORMAT or not all(isinstance(v, str) for v in plan.nodes.values()):
        raise PlanFileError(f"{path}: not a {FORMAT} plan file")
    return plan


def check_spec_unchanged(saved: SavedPlan) -> None:
    """:class:`PlanFileError` when the spec file is not the one planned."""
    now = file_sha256(saved.spec_path)
    if now != saved.spec_sha256:
        raise PlanFileError(
            f"{saved.spec_path} changed since the plan was made (sha256 {saved.spec_sha256[:12]}..., now "
            f"{now[:12]}...): nothing was applied; plan again and review it"
        )


def moved(saved: SavedPlan, result: PlanResult) -> list[str]:
    """What differs between the saved plan and ``result`` (the same nodes and layers planned now):
    one line per node that moved, and one for the cluster-wide part; empty when nothing did."""
    cluster, nodes = digests(result)
    lines = []
    if cluster != saved.cluster:
        lines.append("the spec fields changed since the last apply, or the nodes leaving, differ (another apply ran?)")
    for name in sorted(set(saved.nodes) | set(nodes)):
        if name not in nodes:
            lines.append(f"{name}: planned then, not now")
        elif name not in saved.nodes:
            lines.append(f"{name}: planned now, not then")
        elif nodes[name] != saved.nodes[name]:
            why = result.errors.get(name) or "its state differs: apply would now do something else there"
            lines.append(f"{name}: {why}")
    return lines


def refusal(path: Path, lines: list[str]) -> str:
    """The message of a refused stale plan."""
    shown = "\n".join(f"  {line}" for line in lines)
    return f"{path}: the cluster moved since the plan was made; nothing was applied; plan again:\n{shown}"

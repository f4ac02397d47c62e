"""Discovered node hardware: the facts file ``gpuforge discover`` writes and what the spec takes from it.

The file is ``<spec stem>.hardware.json`` beside the spec (``cluster.yaml`` -> ``cluster.hardware.json``),
so it travels with the spec and is reviewed with it. For each group with ``hardware.discover: true``
whose nodes are all in the file, the group's figures become the nodes' (sockets, cores per socket,
threads per core, as slurmd -C reports them) and RealMemory the smallest node's memory less the
margin (``hardware_rules.slurm_real_memory``). A group some of whose nodes are not in the file keeps
no figures (``check`` warns, render/plan/apply refuse: run gpuforge discover SPEC first).

Invariants: a group's nodes must agree on their CPU topology (else the spec is refused, naming the
nodes); the file is read only when some group asks for it, as a regular file within
:data:`FACTS_BYTES`; anything wrong with it is a SpecError naming the file, never a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuforge.spec.bounded_read import InputFileError, read_regular_file
from gpuforge.spec.errors import SpecError, SpecIssue
from gpuforge.spec.hardware_rules import slurm_real_memory
from gpuforge.spec.limits import Limit
from gpuforge.spec.model import Hardware, NodeGroup, Spec

FORMAT = 1
FACTS_BYTES = Limit(
    "bytes in a hardware facts file",
    32 * 2**20,
    "a node's facts (CPUs, memory, NUMA, GPUs, NICs, disks) are well under 2 KB: 10,000 nodes fit",
)
#: The CPU figures a group's nodes must agree on (the facts' keys are the spec's field names).
TOPOLOGY = ("sockets", "cores_per_socket", "threads_per_core")


def facts_path(spec_path: str | Path) -> Path:
    """Where the facts of the spec at ``spec_path`` are kept: beside it, ``<stem>.hardware.json``."""
    p = Path(spec_path)
    return p.with_name(f"{p.stem}.hardware.json")


def read_facts(path: Path) -> dict[str, dict[str, Any]]:
    """The ``nodes`` of a facts file ({} when there is none); a SpecError when it cannot be used."""
    try:
        data = read_regular_file(path, FACTS_BYTES)
    except InputFileError as e:
        if not path.exists():
            return {}
        raise SpecError([SpecIssue((), e.why)], str(path)) from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SpecError([SpecIssue((), f"not a facts file (JSON): {e}")], str(path)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("nodes"), dict):
        raise SpecError([SpecIssue((), f"not a facts file of format {FORMAT}: run gpuforge discover again")], str(path))
    nodes = doc["nodes"]
    return {str(k): v for k, v in nodes.items() if isinstance(v, dict)}


def apply_discovered(spec: Spec, spec_path: str | Path) -> Spec:
    """``spec`` with its ``discover: true`` groups' figures taken from the facts file beside it."""
    if not any(g.hardware.discover for g in spec.node_groups):
        return spec
    path = facts_path(spec_path)
    facts = read_facts(path)
    groups: list[NodeGroup] = []
    issues: list[SpecIssue] = []
    for gi, group in enumerate(spec.node_groups):
        try:
            groups.append(_discovered_group(group, facts) if group.hardware.discover else group)
        except ValueError as e:
            issues.append(SpecIssue(("node_groups", gi, "hardware"), f"{path.name}: {e}"))
    if issues:
        raise SpecError(issues, str(spec_path))
    return spec.model_copy(update={"node_groups": groups})


def group_figures(names: list[str], facts: dict[str, dict[str, Any]]) -> dict[str, int] | None:
    """The figures of a group of nodes (None when one of them has no facts); ValueError when the
    nodes differ in CPU topology or a node's figures are not whole numbers."""
    if not names or any(n not in facts for n in names):
        return None
    shapes: dict[tuple[int, ...], list[str]] = {}
    memory: list[int] = []
    for name in names:
        node = facts[name]
        values = [w for k in (*TOPOLOGY, "memory_mb") if (w := _whole(node.get(k))) is not None]
        if len(values) != len(TOPOLOGY) + 1:
            raise ValueError(f"{name}: its facts have no whole sockets/cores/threads/memory: run gpuforge discover")
        shapes.setdefault(tuple(values[:3]), []).append(name)
        memory.append(values[3])
    if len(shapes) > 1:
        seen = "; ".join(f"{'x'.join(map(str, s))} on {', '.join(ns[:3])}" for s, ns in shapes.items())
        raise ValueError(f"the group's nodes differ in sockets x cores x threads ({seen}): split the group")
    shape = next(iter(shapes))
    return {**dict(zip(TOPOLOGY, shape, strict=True)), "real_memory_mb": slurm_real_memory(min(memory))}


def _whole(value: Any) -> int | None:
    """``value`` when it is a whole number a figure can be (no bool, above 0, not absurd); else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**40 else None


def _discovered_group(group: NodeGroup, facts: dict[str, dict[str, Any]]) -> NodeGroup:
    figures = group_figures(group.hostnames, facts)
    if figures is None:
        return group
    given = {k: v for k, v in group.hardware.model_dump(mode="python").items() if k in group.hardware.model_fields_set}
    try:
        hw = Hardware.model_validate({**given, **figures})
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ValueError(f"the discovered figures do not fit: {problems}") from None
    return group.model_copy(update={"hardware": hw})

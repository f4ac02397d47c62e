"""``gpuforge discover``: read each node's hardware over SSH and keep it in the facts file beside the spec.

One round trip per node (the validator's SSH transport: host keys checked, vagrant aware): the
hardware reading's one shell command (``gpuforge.probes.hardware``), its output parsed here. Node
output is untrusted: at most :data:`MAX_ANSWER_BYTES` of it is used, a reading with errors is an
error of that node (its old facts stay), and text from a node is shown with control characters
removed. The facts file (``gpuforge.spec.discovered.facts_path``) is rewritten atomically with the
nodes read now merged into what it held; each change is reported as a line of the diff, and so is
a node whose stated figures (a group without ``discover: true``) disagree with what it has.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.spec import Spec, resolve_nodes, select_limit
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.discovered import FORMAT, TOPOLOGY, read_facts
from gpuforge.spec.hardware_rules import runs_slurmd, slurm_real_memory
from gpuforge.spec.nodes import Node
from gpuforge.validator.node.inputs import HARDWARE as HARDWARE_INPUT
from gpuforge.validator.runner import NO_SECRET_KEX_OPTION, SshTransport, Transport, explain_ssh_failure, remote_shell

#: The node reading (``gpuforge.probes.hardware``), as the validator's node checks read it too.
HARDWARE = HARDWARE_INPUT.reading
HardwareInfo = dict[str, Any]

MAX_ANSWER_BYTES = 256 * 1024
READ_TIMEOUT_S = 60.0
WORKERS = 16
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, limit: int = 300) -> str:
    """Text from a node as it may be printed: no control characters (no escape sequences), one line, cut."""
    one = " ".join(_CONTROL.sub("", text).split())
    return one if len(one) <= limit else one[:limit] + "..."


@dataclass
class DiscoverResult:
    """What one run read: each node's facts or its error, the diff lines, and where the file is."""

    path: Path
    facts: dict[str, HardwareInfo] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def read_node(spec: Spec, node: Node, transport: Transport) -> HardwareInfo | str:
    """The node's hardware, or why it could not be read (one line, printable)."""
    done = transport.run(node, remote_shell(spec, HARDWARE.command()), timeout=READ_TIMEOUT_S)
    if done.rc in (255, 124):
        return f"unreachable: {printable(explain_ssh_failure(done.stderr, done.rc))}"
    if len(done.stdout.encode("utf-8", "replace")) > MAX_ANSWER_BYTES:
        return f"answered more than {MAX_ANSWER_BYTES // 1024} KiB: not a hardware reading"
    info = HARDWARE.parse(done.stdout.splitlines())
    if done.rc != 0 or info["errors"]:
        why = "; ".join(info["errors"]) or f"exit {done.rc}: {done.stderr}"
        return f"cannot read its hardware: {printable(why)}"
    return dict(info)


def figure_changes(name: str, old: dict[str, Any] | None, new: HardwareInfo) -> list[str]:
    """``name: sockets 2 -> 1`` for each figure that changed since the facts file was written."""
    if old is None:
        return [f"{name}: new ({describe(new)})"]
    keys = (*TOPOLOGY, "cpus", "memory_mb", "numa_nodes", "gpus", "nics", "hcas", "disks")
    return [f"{name}: {k} {printable(str(old.get(k)))} -> {printable(str(new[k]))}"
            for k in keys if old.get(k) != new[k]]  # fmt: skip


def spec_mismatches(spec: Spec, node: Node, info: HardwareInfo) -> list[str]:
    """Where a node's stated figures (a group without ``discover: true``) differ from what it has."""
    group = next(g for g in spec.node_groups if g.name == node.group)
    hw = group.hardware
    if hw.discover or not runs_slurmd(spec, group) or hw.missing_figures:
        return []
    out = [f"{node.name}: the spec says {k} {getattr(hw, k)}, the node has {info[k]}"
           for k in TOPOLOGY if getattr(hw, k) != info[k]]  # fmt: skip
    if hw.real_memory_mb > info["memory_mb"]:
        out.append(
            f"{node.name}: the spec says real_memory_mb {hw.real_memory_mb}, the node has {info['memory_mb']} MiB "
            f"(Slurm would mark it INVALID: at most {slurm_real_memory(info['memory_mb'])} leaves the 2% margin)"
        )
    return out


def describe(info: HardwareInfo) -> str:
    gpus = ", ".join(f"{n} x 10de:{d}" for d, n in info["gpus"].items()) or "no NVIDIA GPU"
    return (
        f"{info['sockets']} x {info['cores_per_socket']} cores x {info['threads_per_core']} threads, "
        f"{info['memory_mb']} MiB, {info['numa_nodes']} NUMA node(s), {gpus}"
    )


def write_facts(path: Path, cluster: str, nodes: dict[str, Any]) -> None:
    """The facts file, written whole and renamed into place (never half-written)."""
    doc = {"format": FORMAT, "cluster": cluster, "nodes": dict(sorted(nodes.items()))}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def discover(cluster: Cluster, limit: str | None = None, transport: Transport | None = None) -> DiscoverResult:
    """Read the selected nodes (default: all), merge them into the facts file, and say what changed."""
    spec = cluster.spec
    wanted = set(select_limit(spec, limit)) if limit else None
    nodes = [n for n in resolve_nodes(spec) if wanted is None or n.name in wanted]
    tr = transport or SshTransport(cluster, NO_SECRET_KEX_OPTION)
    path = cluster.facts_file
    old = read_facts(path)
    result = DiscoverResult(path)
    with ThreadPoolExecutor(max_workers=min(WORKERS, max(1, len(nodes)))) as pool:
        answers = list(pool.map(lambda n: read_node(spec, n, tr), nodes))
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, str):
            result.errors[node.name] = answer
            continue
        result.facts[node.name] = answer
        result.changes += figure_changes(node.name, old.get(node.name), answer)
        result.changes += spec_mismatches(spec, node, answer)
    if result.facts:
        write_facts(path, spec.cluster.name, {**old, **result.facts})
    return result

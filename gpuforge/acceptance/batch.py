"""A campaign's jobs: who runs together, the batch script each job runs, and reading its output.

One job per partition (or per leaf switch and partition, ``acceptance.group_by``) with one task
per node. The job's script (:func:`batch_script`) carries the node runner's source and the step
configuration in its environment (no file to copy to the nodes, no shared file system needed),
runs the runner on every node in one ``srun`` step, then the steps that span nodes: the pyxis
container step and the NCCL run across the leaf. Everything the job prints goes to one file on
its batch host, read back by :func:`decode_output`.

Invariants: a spec value reaches the script only as a typed token (``gpuforge.spec.acceptance``)
and quoted for ``sh``; the runner's and config's base64 text holds no quote; the output is read
only from marked lines (``GFACCEPT``, ``GFSTEP``, ``GFCONTAINER``, ``GFLEAF``), anything else a
node prints is ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuforge.acceptance import tools
from gpuforge.spec import Spec, hostlist
from gpuforge.spec.acceptance import GroupBy
from gpuforge.spec.bounded_read import bounded_json, inflate
from gpuforge.spec.model import Role, Scheduler
from gpuforge.spec.nodes import Node, resolve_nodes, select_nodes

RUNNER_ENV = "GFACCEPT_RUNNER"
CONFIG_ENV = "GFACCEPT_CONFIG"
#: Where the job's output lands on its batch host, to be read back and trusted: root's own folder
#: (0755 root, made by every apply), never a world-writable one such as /var/tmp, where another
#: user could plant the next job's file (a link, or a file it keeps writing forged lines into).
OUTPUT_DIR = "/var/lib/gpuforge"
#: The job's working directory (its scratch files are mktemp's).
WORK_DIR = "/var/tmp"
#: Where a node keeps its own copy of its report (read it there when the job's output is lost).
KEEP_DIR = "/var/lib/gpuforge/accept"
JOB_PREFIX = "gpuforge-accept"
BOOT = f'import base64,os,zlib;exec(compile(zlib.decompress(base64.b64decode(os.environ["{RUNNER_ENV}"])),"gpuforge-accept-runner","exec"))'  # noqa: E501
#: Slack on top of the steps' own durations: start-up, the health program, the copy of the output.
SLACK_S = 600


@dataclass(frozen=True)
class JobGroup:
    """The nodes one job tests: a partition (and, by leaf switch, a leaf)."""

    name: str
    partition: str | None
    leaf: str | None
    nodes: tuple[str, ...]
    gpus: tuple[tuple[str, int], ...]
    leaves: tuple[tuple[str, str | None], ...] = ()
    """Each node's leaf switch (the NCCL run spans the GPU nodes of one leaf)."""

    @property
    def gpu_nodes(self) -> list[str]:
        return [n for n, g in self.gpus if g > 0]


@cache
def runner_source() -> str:
    """The node runner's source text (shipped as is)."""
    return Path(__file__).with_name("node_runner.py").read_text()


def _b64(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 9)).decode()


def partition_of(spec: Spec, node: Node) -> str | None:
    """The partition a node is tested in: the first of the spec's partitions that holds it."""
    if spec.slurm is None:
        return None
    return next((p.name for p in spec.slurm.partitions if node.name in select_nodes(spec, p.nodes)), None)


def campaign_nodes(spec: Spec, names: list[str] | None = None) -> list[Node]:
    """The nodes a campaign tests (Slurm compute nodes, Kubernetes workers; all of them, or those of
    ``names``), in spec order."""
    wanted = set(names) if names is not None else None
    role = Role.K8S_WORKER if spec.cluster.scheduler is Scheduler.KUBERNETES else Role.COMPUTE
    return [n for n in resolve_nodes(spec) if n.has(role) and (wanted is None or n.name in wanted)]


def plan_groups(spec: Spec, nodes: list[Node]) -> list[JobGroup]:
    """Nodes grouped into jobs: by partition, or by (leaf switch, partition); spec order kept."""
    by_leaf = spec.acceptance.group_by is GroupBy.LEAF_SWITCH
    groups: dict[tuple[str | None, str | None], list[Node]] = {}
    for node in nodes:
        key = (node.leaf_switch if by_leaf else None, partition_of(spec, node))
        groups.setdefault(key, []).append(node)
    out = []
    for (leaf, part), members in groups.items():
        if by_leaf:
            name = f"{leaf or 'no-leaf'}" + (f"-{part}" if sum(k[0] == leaf for k in groups) > 1 else "")
        else:
            name = part or "no-partition"
        gpus = tuple((n.name, n.hardware.gpu_count) for n in members)
        leaves = tuple((n.name, n.leaf_switch) for n in members)
        out.append(JobGroup(name, part, leaf, tuple(n.name for n in members), gpus, leaves))
    return out


def runner_steps(spec: Spec, gpus: bool = True) -> list[dict[str, Any]]:
    """The node runner's steps with their argv and timeouts (seconds plus slack); the GPU steps
    only for a group with GPU nodes (``gpus``)."""
    st = spec.acceptance.steps

    def step(name: str, argv: list[str], seconds: int, **extra: Any) -> dict[str, Any]:
        return {"name": name, "argv": argv, "timeout": seconds + max(60, seconds // 10), **extra}

    steps = []
    if st.health.enabled:
        steps.append(step("health", tools.health(), 60))
    if st.cpu.enabled:
        steps.append(step("cpu", tools.stress_cpu(st.cpu), st.cpu.seconds))
    if st.memory.enabled:
        steps.append(step("memory", tools.stress_memory(st.memory), st.memory.seconds))
    if st.disk.enabled:
        steps.append(step("disk", tools.fio(st.disk), st.disk.seconds, scratch_in=st.disk.directory))
    if st.dcgm.enabled and gpus:
        steps.append(step("dcgm", tools.dcgm_diag(st.dcgm), st.dcgm.seconds, needs_gpu=True))
    if st.nccl.enabled and gpus:
        steps.append(step("nccl_node", tools.nccl_node(st.nccl), st.nccl.seconds, needs_gpu=True))
    return steps


def pyxis_on(spec: Spec) -> bool:
    return spec.slurm is not None and spec.slurm.containers.pyxis


def time_limit_minutes(spec: Spec, group: JobGroup) -> int:
    """The job's time limit: the spec's, or every step's allowance plus :data:`SLACK_S`."""
    acc = spec.acceptance
    if acc.time_limit_minutes:
        return acc.time_limit_minutes
    total = SLACK_S + sum(s["timeout"] for s in runner_steps(spec, bool(group.gpu_nodes)))
    if acc.steps.container.enabled and pyxis_on(spec):
        total += acc.steps.container.seconds
    if acc.steps.nccl.enabled and acc.steps.nccl.across_leaf:
        total += acc.steps.nccl.seconds * len(leaf_sets(group))
    return -(-total // 60)


def runner_config(spec: Spec, group: JobGroup, campaign: str) -> dict[str, Any]:
    steps = runner_steps(spec, bool(group.gpu_nodes))
    return {"campaign": campaign, "steps": steps, "gpus": dict(group.gpus), "keep_dir": KEEP_DIR}


def batch_script(spec: Spec, group: JobGroup, campaign: str, reservation: str | None = None) -> str:
    """The whole ``sbatch`` script of one group (``sh``)."""
    k = len(group.nodes)
    config = base64.b64encode(json.dumps(runner_config(spec, group, campaign)).encode()).decode()
    head = ["#!/bin/sh", f"#SBATCH --job-name={JOB_PREFIX}-{group.name}", f"#SBATCH --nodes={k}",
            f"#SBATCH --nodelist={hostlist.compress(list(group.nodes))}", "#SBATCH --ntasks-per-node=1",
            "#SBATCH --exclusive", "#SBATCH --no-requeue", f"#SBATCH --time={time_limit_minutes(spec, group)}",
            f"#SBATCH --output={OUTPUT_DIR}/{JOB_PREFIX}-%j.out", f"#SBATCH --chdir={WORK_DIR}"]  # fmt: skip
    if group.partition:
        head.append(f"#SBATCH --partition={group.partition}")
    if reservation:
        head.append(f"#SBATCH --reservation={reservation}")
    body = [
        f"# gpuforge accept: campaign {campaign}, group {group.name} (the runner: gpuforge/acceptance/node_runner.py)",
        f"{RUNNER_ENV}='{_b64(runner_source().encode())}'",
        f"{CONFIG_ENV}='{config}'",
        f"export {RUNNER_ENV} {CONFIG_ENV}",
        'echo "GFBEGIN $SLURM_JOB_ID $(date +%s)"',
        *task_layout_lines(group),
        f'SLURM_HOSTFILE="$gfhosts" srun -N{k} -n{k} --distribution=arbitrary --label --kill-on-bad-exit=0 '
        f"python3 -c {shlex.quote(BOOT)}",
        'echo "GFSTEP nodes rc=$?"',
        'rm -f "$gfhosts"',
    ]
    body += _spanning_steps(spec, group)
    body.append('echo "GFEND $(date +%s)"')
    return "\n".join(head + body) + "\n"


def task_layout_lines(group: JobGroup) -> list[str]:
    """Shell lines writing the step's host file: task ``i`` runs on ``group.nodes[i]`` (srun's
    ``--distribution=arbitrary`` lays tasks out in the order of ``SLURM_HOSTFILE``; ``--label``
    prefixes each line with the task number, so :func:`decode_output` knows which node printed it)."""
    return ["gfhosts=$(mktemp)", f"printf '%s\\n' {' '.join(shlex.quote(n) for n in group.nodes)} >\"$gfhosts\""]


def _timed(name: str, command: str, prefix: str | None = None) -> list[str]:
    """``command`` with its status and seconds (``GFSTEP <name> rc= seconds=``); output marked with ``prefix``."""
    lines = ["t0=$(date +%s)"]
    if prefix:
        lines += ["o=$(mktemp)", f'{command} >"$o" 2>&1', "rc=$?", f"sed 's/^/{prefix} /' \"$o\"", 'rm -f "$o"']
    else:
        lines += [f"{command} 2>&1", "rc=$?"]
    return [*lines, f'echo "GFSTEP {name} rc=$rc seconds=$(( $(date +%s) - t0 ))"']


def leaf_sets(group: JobGroup) -> dict[str, list[str]]:
    """Per leaf switch, the group's GPU nodes under it (two or more: the NCCL run needs a pair)."""
    gpu = dict(group.gpus)
    sets: dict[str, list[str]] = {}
    for node, leaf in group.leaves:
        if leaf and gpu.get(node, 0) > 0:
            sets.setdefault(leaf, []).append(node)
    return {leaf: nodes for leaf, nodes in sets.items() if len(nodes) > 1}


def _spanning_steps(spec: Spec, group: JobGroup) -> list[str]:
    st = spec.acceptance.steps
    out: list[str] = []
    if st.container.enabled and pyxis_on(spec):
        out += _timed("container", tools.container_srun(st.container, len(group.nodes)))
    if st.nccl.enabled and st.nccl.across_leaf:
        gpus = dict(group.gpus)
        for leaf, nodes in leaf_sets(group).items():
            per_node = min(gpus[n] for n in nodes)
            command = tools.nccl_leaf_srun(st.nccl, nodes, per_node)
            out += _timed(f"nccl_leaf.{leaf}", command, prefix=f"GFLEAF {leaf}")
    return out


# --------------------------------------------------------------------------- output


@dataclass
class JobOutput:
    """What one job printed, read from its marked lines."""

    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: dict[str, dict[str, int]] = field(default_factory=dict)
    container_ok: set[str] = field(default_factory=set)
    container_text: list[str] = field(default_factory=list)
    leaf_text: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    ended: bool = False


_CHUNK = re.compile(r"^GFACCEPT (\S{1,253}) (\d{1,6})/(\d{1,6}) ([A-Za-z0-9+/=]{0,4096})$")
_STEP = re.compile(r"^GFSTEP (\S{1,253})((?: [a-z]{1,16}=-?\d{1,18}){0,8})$")
#: srun --label's prefix: the task number (maybe padded with spaces), a colon and a space.
_LABEL = re.compile(r"^ *(\d{1,9}): ")


def decode_output(text: str, tasks: Sequence[str], labelled: bool = True) -> JobOutput:
    """Every node's report (chunks joined in order; a node with a missing chunk is a problem).

    Invariant: a report counts only for the node that printed it. ``labelled``: the runner step's
    lines carry srun's task label and task ``i`` ran on ``tasks[i]`` (:func:`task_layout_lines`);
    otherwise (a pod's log) every line is from ``tasks[0]``. A report line that claims another node,
    or has no label, is dropped and named in ``problems``; a task's line is never read as one of the
    batch script's own markers (``GFSTEP``, ``GFEND``, ...).
    """
    out = JobOutput()
    chunks: dict[str, dict[int, str]] = {}
    totals: dict[str, int] = {}
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        label = _LABEL.match(line) if labelled else None
        if label:
            line = line[label.end() :]
        bound = _bound_node(tasks, label, labelled)
        if m := _CHUNK.match(line):
            if bound != m[1]:
                out.problems.append(_claim_problem(bound, m[1]))
                continue
            chunks.setdefault(m[1], {})[int(m[2])] = m[4]
            totals[m[1]] = int(m[3])
        elif label:
            continue  # a task's own line: only its report is read
        elif m := _STEP.match(line):
            out.steps[m[1]] = {k: int(v) for k, v in re.findall(r"([a-z]+)=(-?\d+)", m[2])}
        elif line.startswith("GFCONTAINER "):
            out.container_ok.add(line.split()[1] if len(line.split()) > 1 else "")
        elif line.startswith("GFLEAF "):
            _, leaf, *rest = line.split(" ", 2)
            out.leaf_text.setdefault(leaf, []).append(rest[0] if rest else "")
        elif line.startswith("GFEND"):
            out.ended = True
        elif line.strip() and not line.startswith("GFBEGIN"):
            out.container_text.append(line.strip())
    _join_reports(out, chunks, totals)
    return out


def _bound_node(tasks: Sequence[str], label: re.Match[str] | None, labelled: bool) -> str | None:
    """The node a line came from: its task's (labelled output), the log's own node, else None."""
    if not labelled:
        return tasks[0] if tasks else None
    if label is None:
        return None
    i = int(label[1])
    return tasks[i] if i < len(tasks) else None


def _claim_problem(bound: str | None, claimed: str) -> str:
    who = bound or "a line without a task label"
    return f"{who} printed a report line for {claimed}: dropped (a node reports only for itself)"


def _join_reports(out: JobOutput, chunks: dict[str, dict[int, str]], totals: dict[str, int]) -> None:
    """Each node's chunks joined, decompressed at most to ``REPORT_BYTES`` and parsed (a problem
    for that node otherwise; the part count is checked without building a list of that size)."""
    for node, parts in chunks.items():
        total = totals[node]
        if len(parts) != total or min(parts) != 1 or max(parts) != total:
            out.problems.append(f"{node}: its report is incomplete ({len(parts)} of {total} parts)")
            continue
        try:
            doc = bounded_json(inflate(base64.b64decode("".join(parts[i] for i in sorted(parts)))))
        except (ValueError, binascii.Error) as e:
            out.problems.append(f"{node}: its report cannot be read: {e}")
            continue
        if not isinstance(doc, dict) or doc.get("node", node) != node:
            out.problems.append(f"{node}: its report names another node: dropped")
            continue
        out.reports[node] = doc

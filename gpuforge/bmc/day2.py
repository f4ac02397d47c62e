"""Day-2 rule of ``power off`` and ``power cycle``: never a node that is in service.

A Slurm compute node may lose power only when the controller (read over SSH, as rollouts read it)
says it is out of service with no job: its ``sinfo`` state is DRAINED, DOWN or FAIL (never
DRAINING or FAILING, which still run jobs) and ``squeue`` lists no job on it. Any other node of
a cluster with a scheduler (a controller, a login node, a Kubernetes node) is refused: gpuforge
cannot tell what runs there (Kubernetes' pod check is not built yet). A spec without a scheduler
node has nothing in service. ``--force`` overrides all of this, loudly (in the CLI).

Invariant: :func:`refusals` names every node it refuses with why, and treats a controller that
cannot answer (SSH, sinfo or squeue failing) as "in service" for every Slurm node asked about.
"""

from __future__ import annotations

import shlex

from gpuforge.orchestrate import remote
from gpuforge.probes.slurm import split_slurm_state
from gpuforge.spec import Role, hostlist, nodes_with, resolve_nodes
from gpuforge.spec.citation import Citation
from gpuforge.spec.cluster import Cluster

#: ``sinfo %T`` base states of a node that runs no job and takes none (flags like ``*`` stripped).
OUT_OF_SERVICE_IDLE = ("drained", "down", "fail")
SOURCE = Citation(
    "Slurm sinfo(1), NODE STATE CODES",
    "https://slurm.schedmd.com/sinfo.html",
    "DRAINED The node is unavailable for use per system administrator request. DRAINING The node is "
    "currently executing a job, but will not be allocated additional jobs. FAIL The node is expected to "
    "fail soon and is unavailable for use per system administrator request. FAILING The node is currently "
    "executing a job, but is expected to fail soon",
)
_SPLIT = "@@gpuforge-squeue"


def slurm_command(nodes: list[str]) -> str:
    """Each node's state (``name|state``), a marker line, then the nodes of every job on them."""
    names = shlex.quote(hostlist.compress(nodes))
    return f"sinfo -h -N -n {names} -o '%N|%T' && echo {_SPLIT} && squeue -h -w {names} -o '%N'"


def parse_slurm(output: str) -> tuple[dict[str, str], set[str]]:
    """``slurm_command``'s output: node -> sinfo state (first line wins), and the nodes with jobs."""
    states: dict[str, str] = {}
    busy: set[str] = set()
    head, _, tail = output.partition(f"{_SPLIT}\n")
    for line in head.splitlines():
        name, sep, state = line.strip().partition("|")
        if sep and name:
            states.setdefault(name, state.strip())
    for line in tail.splitlines():
        if line.strip():
            busy.update(hostlist.expand(line.strip()))
    return states, busy


def slurm_verdicts(nodes: list[str], states: dict[str, str], busy: set[str]) -> dict[str, str]:
    """Node -> why it is in service, for each of ``nodes`` that is (out of service and idle: absent)."""
    out: dict[str, str] = {}
    for n in nodes:
        raw = states.get(n)
        if raw is None:
            out[n] = "Slurm does not list it (sinfo): cannot tell whether it runs jobs"
        elif split_slurm_state(raw)[0] not in OUT_OF_SERVICE_IDLE:
            out[n] = f"in service in Slurm (state {raw}); drain it first (scontrol update State=DRAIN)"
        elif n in busy:
            out[n] = f"jobs still run on it (state {raw}, squeue lists them)"
    return out


def refusals(cluster: Cluster, names: list[str]) -> dict[str, str]:
    """Node -> why it must not lose power now; empty when every node of ``names`` may."""
    spec = cluster.spec
    if spec.kubernetes is not None:
        return dict.fromkeys(names, "a Kubernetes node: not yet: the check for running pods is not built")
    controllers = nodes_with(spec, Role.CONTROLLER)
    if spec.slurm is None or not controllers:
        return {}
    compute = {n.name for n in resolve_nodes(spec) if n.has(Role.COMPUTE)}
    out = {n: "not a Slurm compute node: gpuforge cannot tell what runs on it" for n in names if n not in compute}
    asked = [n for n in names if n in compute]
    if not asked:
        return out
    done = remote.run(cluster, controllers[0].name, slurm_command(asked), timeout=60)
    if done.returncode != 0:
        why = (done.stderr.strip()[-300:] or f"exit status {done.returncode}") + f" (on {controllers[0].name})"
        return {**out, **dict.fromkeys(asked, f"cannot read its Slurm state: {why}")}
    states, busy = parse_slurm(done.stdout)
    return {**out, **slurm_verdicts(asked, states, busy)}

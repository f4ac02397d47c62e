"""``gpuforge plan --fresh``: what a FRESH node of each group's platform would get, connecting to nothing.

Every host is served by ``deploy.fresh_nodes.FreshConnector``, answering as a freshly installed node
of the group's platform row would: its ``/etc/os-release`` (``Distribution.os_release``) and
``uname -m``, nothing else (an empty package database, no files, no units, no accounts), every
command succeeding. The deploys run in dry-run mode, so the plan is the one apply would make on such
a node, with the platform's own package manager and names.

Invariants: nothing leaves this process (no SSH, no node lock, the SSH key is not read); one node
per group (the first of its hostlist) stands for the group; the spec is checked as ``plan`` checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gpuforge.deploy.fresh_nodes import serve_fresh
from gpuforge.deploy.runstate import RunState
from gpuforge.orchestrate import apply
from gpuforge.orchestrate.plan import PlanResult, shown_ops
from gpuforge.spec import Spec, resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.platforms import platform_for

OS_RELEASE = "/etc/os-release"


def fresh_answer(spec: Spec, host: str, command: str) -> list[str]:
    """A fresh node's output for ``command``: its os-release and machine when read, nothing else."""
    if OS_RELEASE not in command and "uname -m" not in command:
        return []
    node = next(n for n in resolve_nodes(spec) if n.name == host)
    platform = platform_for(node.os, node.arch)
    os_id, version = platform.distribution.os_release
    lines = [f"ID={os_id}", f'VERSION_ID="{version}"'] if OS_RELEASE in command else []
    return [*lines, platform.arch.value] if "uname -m" in command else lines


@contextmanager
def fresh_nodes(spec: Spec) -> Iterator[dict[str, list[str]]]:
    """Every host of the run a fresh node of its platform; the control host's SSH files not checked."""
    saved = apply.preflight
    apply.preflight = lambda cluster: None
    try:
        with serve_fresh(lambda host, command: fresh_answer(spec, host, command)) as sent:
            yield sent
    finally:
        apply.preflight = saved


def representatives(spec: Spec) -> list[str]:
    """One node per group: the first of its hostlist."""
    return [g.hostnames[0] for g in spec.node_groups if g.hostnames]


def fresh_plan(cluster: Cluster, on_event: Callable[[str], None] | None = None) -> PlanResult:
    """The plan of a fresh node of each group."""
    spec = cluster.spec
    run = RunState(dry_run=True)
    with fresh_nodes(spec):
        result = apply.run_deploys(cluster, limit=",".join(representatives(spec)), on_event=on_event, run=run)
    hosts = {name: shown_ops(run.planned.get(name, [])) for name in result.hosts}
    errors = {name: h.error for name, h in result.hosts.items() if h.error}
    return PlanResult(hosts, errors)

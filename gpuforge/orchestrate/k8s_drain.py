"""Cordon and drain Kubernetes nodes for a rolling change, and give back only what this took.

Commands run on the first control plane with its admin kubeconfig. ``kubectl drain`` evicts
through the eviction API, so PodDisruptionBudgets are respected (it waits, up to the rollout's
``drain_timeout``, rather than break one); DaemonSet pods stay (``--ignore-daemonsets``). A node
that was already unschedulable (an operator cordoned it) is drained but not marked, so the resume
never uncordons it: only nodes carrying this rollout's annotation are uncordoned.
(``gpuforge.spec.k8s_upstream.SOURCES['safely-drain-node']``)
"""

from __future__ import annotations

import shlex

from gpuforge.spec import k8s_upstream

KUBECTL = f"kubectl --kubeconfig {k8s_upstream.ADMIN_CONF}"
CORDONED_BY = "gpuforge.dev/cordoned-by"
CORDON_MARK = "rolling-change"


def drain_command(nodes: list[str], timeout_s: int) -> str:
    """Cordon (marking the nodes this rollout cordons) and drain each node; fails if a drain times out."""
    parts = []
    for name in nodes:
        n = shlex.quote(name)
        parts.append(
            f"if [ \"$({KUBECTL} get node {n} -o jsonpath='{{.spec.unschedulable}}')\" != true ]; then "
            f"{KUBECTL} annotate node {n} --overwrite {CORDONED_BY}={CORDON_MARK} && {KUBECTL} cordon {n}; fi && "
            f"{KUBECTL} drain {n} --ignore-daemonsets --delete-emptydir-data --timeout={max(1, timeout_s)}s"
        )
    return " && ".join(parts) or "true"


def resume_command(nodes: list[str]) -> str:
    """Uncordon the nodes this rollout cordoned (and drop its mark); leave every other node alone."""
    jsonpath = "{.metadata.annotations.gpuforge\\.dev/cordoned-by}"
    parts = []
    for name in nodes:
        n = shlex.quote(name)
        parts.append(
            f"if [ \"$({KUBECTL} get node {n} -o jsonpath='{jsonpath}')\" = {CORDON_MARK} ]; then "
            f"{KUBECTL} uncordon {n} && {KUBECTL} annotate node {n} {CORDONED_BY}-; fi"
        )
    return " && ".join(parts) or "true"


def state_command() -> str:
    """One line per node: ``name|unschedulable|this rollout's mark`` (empty fields when unset)."""
    jsonpath = (
        "{range .items[*]}{.metadata.name}{'|'}{.spec.unschedulable}{'|'}"
        "{.metadata.annotations.gpuforge\\.dev/cordoned-by}{'\\n'}{end}"
    )
    return f"{KUBECTL} get nodes -o jsonpath={shlex.quote(jsonpath)}"


def parse_states(output: str) -> dict[str, tuple[bool, bool]]:
    """``state_command``'s output: node -> (cordoned, cordoned by a gpuforge rollout)."""
    states: dict[str, tuple[bool, bool]] = {}
    for line in output.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3 or not parts[0]:
            continue
        cordoned = parts[1] == "true"
        states[parts[0]] = (cordoned, cordoned and parts[2] == CORDON_MARK)
    return states

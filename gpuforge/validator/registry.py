"""Every check gpuforge knows: node-local (``nodelocal.py``), cluster-wide and control-host ones.

A check has a stable id ``<area>.<name>``, a layer, a severity, the ids it depends on and
its function. Selecting checks (``--checks``) by id, id prefix or layer pulls in their
dependencies, so that a selected check is never judged without what it relies on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gpuforge.spec.suggest import did_you_mean
from gpuforge.validator import (
    cluster_config,
    cluster_fabric,
    cluster_gpu_jobs,
    cluster_ha,
    cluster_k8s,
    cluster_k8s_certs,
    cluster_network_operator,
    cluster_slurm_conf,
    cluster_slurm_version,
    cluster_storage,
    k8s_probe,
)
from gpuforge.validator.cluster import CLUSTER_CHECKS, CONNECTION
from gpuforge.validator.node import execute, framework
from gpuforge.validator.node.base import LAYERS, SEVERITIES
from gpuforge.validator.node.framework import Check, order_checks, with_dependencies

# Importing ``execute`` imports every node check module, which registers its checks in
# ``framework.NODE_CHECKS``: the registry never depends on who imported what first.
assert execute.NODE_CHECKS is framework.NODE_CHECKS and framework.NODE_CHECKS
# Likewise the Kubernetes cluster checks (cluster_k8s, and k8s_probe's probe checks) register in CLUSTER_CHECKS.
assert any(c.fn is cluster_k8s.k8s_ready for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_gpu_jobs.gpu_binding for c in CLUSTER_CHECKS)
assert any(c.fn is k8s_probe.k8s_cuda_sample for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_config.config_files for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_k8s_certs.certificates for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_ha.controllers for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_storage.mounts for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_slurm_conf.slurm_conf_hash for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_slurm_version.slurm_version for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_fabric.fabric_pairs for c in CLUSTER_CHECKS)
assert any(c.fn is cluster_network_operator.rdma_allocatable for c in CLUSTER_CHECKS)
#: Heavy checks that run only where ``--checks`` names them (id or area), never by default or by layer.
OPT_IN = frozenset({cluster_fabric.PAIRS})
# Cluster checks register as their modules are imported, which depends on who imported what
# first; listed by layer and id, the registry's order is the same in every process.
# The health check's stand-ins for validate's own cluster checks (``Check.validate`` False) are not
# validate's checks.
ALL_CHECKS: list[Check] = [
    CONNECTION,
    *(c for c in framework.NODE_CHECKS if c.validate),
    *sorted(CLUSTER_CHECKS, key=lambda c: (LAYERS.index(c.layer), c.id)),
]
BY_ID: dict[str, Check] = {c.id: c for c in ALL_CHECKS}
ID_RE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")


class UnknownCheck(ValueError):
    """A ``--checks`` token that names no check, prefix or layer."""


def registry_problems(checks: Sequence[Check] = ALL_CHECKS) -> list[str]:
    """Consistency problems of the registry (empty when sound)."""
    problems = []
    ids = [c.id for c in checks]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"duplicate ids: {', '.join(dupes)}")
    by_id = {c.id: c for c in checks}
    for c in checks:
        if not ID_RE.match(c.id):
            problems.append(f"{c.id}: id is not <area>.<name>")
        if c.layer not in LAYERS:
            problems.append(f"{c.id}: unknown layer {c.layer}")
        if c.severity not in SEVERITIES:
            problems.append(f"{c.id}: unknown severity {c.severity}")
        for dep in c.depends_on:
            if dep not in by_id:
                problems.append(f"{c.id}: depends on unknown {dep}")
            elif c.scope == "node" and by_id[dep].scope != "node":
                problems.append(f"{c.id}: a node check cannot depend on the {by_id[dep].scope} check {dep}")
    try:
        order_checks(checks)
    except ValueError as e:
        problems.append(str(e))
    return problems


def _tokens(tokens: str | Iterable[str] | None) -> list[str]:
    if tokens is None:
        return []
    return [t.strip() for t in (tokens.split(",") if isinstance(tokens, str) else tokens) if t.strip()]


def match(token: str) -> list[str]:
    """Check ids a token names: an id, a prefix (``driver``, ``driver.*``) or a layer."""
    prefix = token[:-2] if token.endswith(".*") else token
    hits = [
        c.id
        for c in ALL_CHECKS
        if c.id == token or c.id.startswith(prefix + ".") or (token in LAYERS and c.layer == token)
        if not (token in LAYERS and c.id in OPT_IN)
    ]
    if not hits:
        raise UnknownCheck(f"unknown check {token!r}; {_guess(token)}known: {', '.join(sorted(BY_ID))}")
    return hits


def _guess(token: str) -> str:
    """``did you mean 'driver'? `` for a near miss of an id, an id's prefix or a layer; "" for none."""
    names = {*BY_ID, *(i.split(".")[0] for i in BY_ID), *LAYERS}
    guess = did_you_mean(token.removesuffix(".*"), sorted(names))
    return f"{guess} " if guess else ""


def resolve(tokens: str | Iterable[str] | None, exclude: str | Iterable[str] | None = None) -> list[Check]:
    """Checks for ``--checks``: ids, prefixes (``driver``, ``driver.*``) or layers; plus dependencies.

    ``None`` or empty means every check. ``exclude`` drops checks (same forms) after that; a
    kept check that depends on a dropped one is reported blocked. ``connection.ssh`` always runs.
    """
    items = _tokens(tokens)
    wanted: list[str] = [c.id for c in ALL_CHECKS if c.id not in OPT_IN] if not items else [CONNECTION.id]
    for token in items:
        wanted += match(token)
    chosen = with_dependencies(ALL_CHECKS, wanted)
    dropped = {cid for token in _tokens(exclude) for cid in match(token)} - {CONNECTION.id}
    return [c for c in chosen if c.id not in dropped]

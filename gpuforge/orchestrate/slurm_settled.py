"""Compute nodes a Slurm upgrade already moved are not drained again for ``versions.slurm``.

``gpuforge slurm-upgrade`` moves slurmd to the new version batch by batch without a drain (running
jobs kept). The spec that names the new version then differs from the last applied one in
``versions.slurm``, a rolling field: without this, the next ``apply`` would drain every compute
node for a change that is already on it. Before a rollout, each node the field would roll is
asked which Slurm packages it has installed (``dpkg-query``, one round trip per node, in
parallel); a node at the spec's version leaves the roll for that field
(:func:`gpuforge.orchestrate.rollout.settle`). ``slurm-upgrade`` reads the same to tell which nodes
it has left to move.

Invariants: a node leaves the roll only on a positive reading: its slurmd package installed and
every Slurm package it has (the patterns an upgrade moves together) at exactly the spec's package
version (``versions.slurm``; for ``distro``, the version its package manager offers, ``apt-cache
policy``'s Candidate). An unreachable node, a failed read, an RPM node (``distro`` only, no exact
version to compare) or a node at another version rolls as before. Other rolling fields still roll it.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from subprocess import CompletedProcess

from gpuforge.orchestrate import remote
from gpuforge.orchestrate.rollout import RolloutPlan, settle
from gpuforge.orchestrate.slurm_upgrade_commands import DEB_PATTERNS
from gpuforge.render.slurm import slurm_version_pin
from gpuforge.spec import Spec, hostlist, resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.slurm_packages import SlurmSource, package_for

#: The rolling field this module settles.
SLURM_FIELD = "versions.slurm"
#: Seconds one node's read may take.
READ_TIMEOUT = 60
#: Nodes read at once.
PARALLEL = 16

NodeRead = Callable[[str, str], "CompletedProcess[str]"]
"""Runs a read-only command on a node: (node, command) -> completed process (never raises)."""


def slurmd_package(spec: Spec) -> str:
    """slurmd's deb for the spec's ``slurm.source`` (``slurmd``, ``slurm-smd-slurmd``)."""
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    return package_for(source, True, "slurmd") or "slurmd"


def installed_command(spec: Spec) -> str:
    """``__installed=<package> <version> <status>`` for every package of the spec's Slurm build dpkg
    knows (``slurm_upgrade_commands.DEB_PATTERNS``: the packages an upgrade moves together); with
    ``versions.slurm: distro`` also ``__candidate=<version>`` (apt's slurmd candidate, from its lists:
    no update). Exits 0 whatever it finds."""
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    out = (
        f"dpkg-query -W -f='__installed=${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' "
        f"{DEB_PATTERNS[source]} 2>/dev/null; "
    )
    if slurm_version_pin(spec) is None:
        policy = f"apt-cache policy {shlex.quote(slurmd_package(spec))} 2>/dev/null | sed -n 's/^ *Candidate: //p'"
        out += f'echo "__candidate=$({policy})"; '
    return out + "true"


def parse_installed(text: str) -> tuple[dict[str, str], str | None]:
    """(installed package -> version, apt's candidate or None) from :func:`installed_command`."""
    found: dict[str, str] = {}
    candidate = None
    for line in text.splitlines():
        if line.startswith("__installed="):
            parts = line[len("__installed=") :].split()
            # ${db:Status-Abbrev}: its second letter is the state, "i" installed (dpkg-query(1)).
            if len(parts) == 3 and len(parts[2]) >= 2 and parts[2][1] == "i":
                found[parts[0]] = parts[1]
        elif line.startswith("__candidate="):
            value = line[len("__candidate=") :].strip()
            candidate = value if value and value != "(none)" else None
    return found, candidate


def at_spec_version(spec: Spec, text: str, need_slurmd: bool = True) -> str | None:
    """The version the node runs when it is the spec's, else None (see the module's invariants);
    ``need_slurmd``: only a node with slurmd installed counts (a compute node)."""
    found, candidate = parse_installed(text)
    target = slurm_version_pin(spec) or candidate
    if target is None or not found or (need_slurmd and slurmd_package(spec) not in found):
        return None
    return target if all(v == target for v in found.values()) else None


def read_settled(spec: Spec, nodes: list[str], run: NodeRead, need_slurmd: bool = True) -> dict[str, str]:
    """Of ``nodes``, those at the spec's Slurm version (-> that version), read in parallel."""
    deb = {n.name for n in resolve_nodes(spec) if n.os.is_deb}
    asked = [n for n in nodes if n in deb]
    if not asked:
        return {}
    command = installed_command(spec)

    def one(name: str) -> str | None:
        cp = run(name, command)
        return at_spec_version(spec, cp.stdout, need_slurmd) if cp.returncode == 0 else None

    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(asked))) as pool:
        versions = dict(zip(asked, pool.map(one, asked), strict=True))
    return {n: v for n, v in versions.items() if v is not None}


def settle_upgraded(cluster: Cluster, plan: RolloutPlan, say: Callable[[str], None]) -> None:
    """Take the nodes already at the spec's Slurm version out of ``plan``'s roll for ``versions.slurm``."""
    spec = cluster.spec
    nodes = [n for n in plan.rolling_nodes if SLURM_FIELD in plan.reasons.get(n, [])]
    if spec.slurm is None or not nodes:
        return
    done = read_settled(spec, nodes, lambda n, c: remote.run(cluster, n, c, timeout=READ_TIMEOUT))
    if done:
        versions = ", ".join(sorted(set(done.values())))
        say(f"{hostlist.compress(sorted(done))} already run Slurm {versions}: not drained for {SLURM_FIELD}")
    settle(plan, spec, SLURM_FIELD, set(done))

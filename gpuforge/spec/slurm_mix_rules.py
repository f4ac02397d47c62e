"""One cluster, several Slurm versions: which combinations Slurm allows, per node group.

A node group's Slurm comes from its platform when ``slurm.source`` is ``distro`` and ``versions.slurm``
is ``distro`` (the distribution's archive: Debian 12 ships 22.05, Ubuntu 24.04 23.11); a pinned
``versions.slurm`` is the same build on every node, and a site repository's version is not known
before the nodes are read, so neither mixes versions here.

SchedMD's rules (``SOURCES``): slurmdbd at the same or a newer major release than slurmctld, and
close enough (slurmctld's release in slurmdbd's compatibility window); slurmctld hosts all at one
release; every slurmd and every client (login nodes' commands) at slurmctld's release or an older one
inside its compatibility window (``slurm_releases.COMPATIBLE``).

Invariant: :func:`slurm_release_rules` yields nothing when every group's version is unknown or all
are one major release; it never guesses the version of a platform whose row names none.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpuforge.spec import slurm_gpu, slurm_releases
from gpuforge.spec.citation import Citation
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.slurm_packages import SlurmSource

SOURCES: dict[str, Citation] = {
    "slurm-daemon-order": Citation(
        "Slurm Upgrade Guide: slurmdbd (Accounting), slurmctld (Controller), slurmd (Compute Nodes)",
        "https://slurm.schedmd.com/upgrades.html#slurmdbd ; github.com/SchedMD/slurm doc/html/upgrades.shtml "
        "(commit 0cf89c66455e, 'Last modified 18 July 2024')",
        "slurmdbd: 'it must be at the same or higher major release number as the slurmctld daemon(s), and at a "
        "close enough version for compatibility'; slurmctld: 'Rolling upgrades are also possible if the slurmctld "
        "is upgraded first. When multiple slurmctld hosts are used, all should be upgraded simultaneously.'; "
        "Compatibility Window: 'slurmdbd 23.11.x is capable of accepting messages from slurmctld daemons and "
        "commands with a version of 23.11.x, 23.02.x or 22.05.x'; slurmd: 'It is also possible to perform a "
        "rolling upgrade by upgrading the slurmd nodes later in any number of groups. Sites are encouraged to "
        "minimize the amount of time during which mixed versions are used in a cluster.'",
    ),
    "compute-not-newer": Citation(
        "Google Cloud Cluster Director: Slurm controller versions, Compute node image compatibility",
        "https://docs.cloud.google.com/cluster-director/docs/slurm-controller-versions",
        "'Slurm requires that the compute nodes in a cluster run a Slurm version that is the same as or earlier "
        "than the version that your controller node runs.'",
    ),
}

WAY_OUT = (
    "upgrade the controller and accounting groups first (their os, or one Slurm for all: slurm.source: build, or "
    "site, with versions.slurm pinned), then the other groups"
)


@dataclass(frozen=True)
class GroupSlurm:
    """A Slurm node group's version as its platform ships it."""

    index: int
    name: str
    hosts: str
    platform: str
    version: str
    roles: frozenset[Role]

    @property
    def major(self) -> str:
        return slurm_releases.major_of(self.version)


def group_slurm_versions(spec: Spec) -> list[GroupSlurm]:
    """Each Slurm group whose version is known from its platform (the distribution's archive)."""
    s = spec.slurm
    if s is None or s.source is not SlurmSource.DISTRO or spec.versions.slurm != "distro":
        return []
    out = []
    for i, group in enumerate(spec.node_groups):
        os_family = group.os or spec.cluster.os
        row = slurm_gpu.nvml_plugin(os_family)
        roles = frozenset(group.roles) & {Role.CONTROLLER, Role.ACCOUNTING_DB, Role.COMPUTE, Role.LOGIN}
        if row is None or row.archive_slurm is None or not roles:
            continue
        out.append(GroupSlurm(i, group.name, group.hosts, os_family.distribution.title, row.archive_slurm, roles))
    return out


def _key(major: str) -> tuple[int, int]:
    return int(major[:2]), int(major[3:])


def _describe(g: GroupSlurm) -> str:
    return f"node group {g.name!r} ({g.hosts}: {g.platform}, Slurm {slurm_releases.upstream_of(g.version)})"


def _older_than_window(newer: GroupSlurm, older: GroupSlurm) -> str | None:
    """Why ``older``'s major release is outside ``newer``'s compatibility window (None: inside it)."""
    if older.major == newer.major:
        return None
    window = slurm_releases.COMPATIBLE.get(newer.major)
    if window is None:
        return f"Slurm {newer.major} is not in gpuforge's table of SchedMD's compatibility window"
    if older.major in window:
        return None
    return f"Slurm {newer.major} talks to {', '.join(window)} and its own release only"


def slurm_release_rules(spec: Spec) -> Iterator[SpecIssue]:
    """The versions of the groups' Slurm against SchedMD's order and window (see the module)."""
    groups = group_slurm_versions(spec)
    if len({g.major for g in groups}) < 2:
        return
    ctlds = [g for g in groups if Role.CONTROLLER in g.roles]
    dbds = [g for g in groups if Role.ACCOUNTING_DB in g.roles]
    if len({g.major for g in ctlds}) > 1:
        yield SpecIssue(
            ("node_groups", ctlds[-1].index, "os"),
            f"slurmctld hosts at different Slurm releases ({'; '.join(map(_describe, ctlds))}): all slurmctld "
            "hosts run one release (SchedMD: 'all should be upgraded simultaneously'); put them on one os",
        )
        return
    if not ctlds:
        return
    ctld = ctlds[0]
    for dbd in dbds:
        yield from _pair_issue(dbd, ctld, "slurmdbd", "slurmctld", at=dbd)
    for g in groups:
        if g.roles & {Role.COMPUTE, Role.LOGIN} and g not in ctlds:
            daemon = "slurmd" if Role.COMPUTE in g.roles else "the Slurm commands"
            yield from _pair_issue(ctld, g, "slurmctld", daemon, at=g)


def _pair_issue(
    newer: GroupSlurm, older: GroupSlurm, newer_daemon: str, older_daemon: str, at: GroupSlurm
) -> Iterator[SpecIssue]:
    """``newer`` must run the same or a later major release than ``older``, with ``older`` in its window;
    an issue names the field ``os`` of group ``at``."""
    if _key(newer.major) < _key(older.major):
        yield SpecIssue(
            ("node_groups", at.index, "os"),
            f"{older_daemon} of {_describe(older)} is newer than {newer_daemon} of {_describe(newer)}: Slurm "
            f"requires {newer_daemon} at the same or a later major release than {older_daemon} (SchedMD's Upgrade "
            f"Guide); {WAY_OUT}",
        )
        return
    outside = _older_than_window(newer, older)
    if outside:
        yield SpecIssue(
            ("node_groups", at.index, "os"),
            f"{older_daemon} of {_describe(older)} is outside the compatibility window of {newer_daemon} of "
            f"{_describe(newer)}: {outside} (SchedMD's Upgrade Guide); move {older.name!r} to a release whose Slurm "
            "is in that window first (its os), or run one Slurm on all (slurm.source: build, or site, with "
            "versions.slurm pinned)",
        )

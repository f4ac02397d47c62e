"""Cross-field rules of what the site supplies: its package sources and its own steps, checks and users.

Offline mode names its bundle and pins its key, mirror mode names a mirror; site Ansible steps and
testinfra checks target known roles or groups; an exact Slurm version is held on Debian/Ubuntu only
unless gpuforge builds it; Slurm users, UIDs and GIDs are unique. Each problem names its field;
registered in :mod:`gpuforge.spec.rules` (``RULES``).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec import hostlist
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Role, SourceMode, Spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.rule_helpers import dupes
from gpuforge.spec.slurm_packages import SlurmSource


def source_rules(spec: Spec) -> Iterator[SpecIssue]:
    src = spec.sources
    if src.mode is SourceMode.OFFLINE and not src.bundle_dir:
        yield SpecIssue(("sources", "bundle_dir"), "mode offline needs bundle_dir (made by 'gpuforge bundle')")
    if src.mode is SourceMode.OFFLINE and not src.bundle_fingerprint:
        yield SpecIssue(
            ("sources", "bundle_fingerprint"),
            "mode offline needs bundle_fingerprint: the signing key fingerprint 'gpuforge bundle' printed "
            "(without it a changed bundle could re-sign itself); 'gpuforge bundle SPEC -o DIR' builds from this "
            "spec without it and ends with the line to add: 'pin it: sources.bundle_fingerprint: <40 hex digits>'",
        )
    if src.mode is SourceMode.MIRROR and not (src.apt_proxy or any(src.mirrors.model_dump().values())):
        yield SpecIssue(("sources", "mirrors"), "mode mirror needs apt_proxy or at least one mirror URL")


def site_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Site Ansible steps and testinfra checks name known roles or groups; users are unique."""
    known = {r.value for r in Role} | {g.name for g in spec.node_groups}
    names = [s.name for s in spec.site.ansible]
    for name in dupes(names):
        yield SpecIssue(("site", "ansible"), f"step {name!r} is listed more than once")
    for i, step in enumerate(spec.site.ansible):
        if (step.role is None) == (step.playbook is None):
            yield SpecIssue(("site", "ansible", i), f"{step.name}: give exactly one of role or playbook")
        for t in step.targets:
            if t not in known:
                yield SpecIssue(("site", "ansible", i, "targets"), f"{t!r} is neither a node role nor a node group")
    for i, checks in enumerate(spec.site.testinfra):
        for t in checks.targets:
            if t not in known:
                yield SpecIssue(("site", "testinfra", i, "targets"), f"{t!r} is neither a node role nor a node group")
    # gpuforge's own build (slurm.source: build) makes the packages at versions.slurm on rpm platforms too
    # (slurm_rpm_build: no %{?dist}), and dnf installs them at that version
    if spec.slurm is not None and spec.versions.slurm != "distro" and spec.slurm.source is not SlurmSource.BUILD:
        rpm = sorted(n.name for n in resolve_nodes(spec) if not n.os.is_deb and "slurm" in deploys_for(n))
        if rpm:
            yield SpecIssue(
                ("versions", "slurm"),
                f"an exact Slurm version is held with apt (Debian/Ubuntu); {hostlist.compress(rpm)} run RHEL: "
                "use 'distro' there",
            )
    if spec.slurm is not None:
        users = spec.slurm.users
        for name in dupes(u.name for u in users):
            yield SpecIssue(("slurm", "users"), f"user {name} is listed more than once")
        for uid in dupes(str(u.uid) for u in users):
            yield SpecIssue(("slurm", "users"), f"UID {uid} is given to more than one user")
        for gid in dupes(str(u.group_id) for u in users):
            yield SpecIssue(("slurm", "users"), f"GID {gid} is given to more than one user's group")

"""What ``slurm.source: build`` needs before any host is touched.

* ``slurm.build`` is set, and only with ``source: build``;
* ``versions.slurm`` is the package version SchedMD's ``debian/changelog`` gives (``24.11.5-1``);
* the tarball's sha256 is known: gpuforge's cited table (``slurm_tarballs``) or ``slurm.build.sha256``,
  and the two agree where both are given; without ``tarball`` the offline bundle must be the source;
* every build host is a node of the spec, and each platform (OS release, architecture) of the Slurm
  nodes has exactly one build host of that platform (the packages are built where they run): SchedMD's
  ``debian/`` on deb platforms, its ``slurm.spec`` (``rpmbuild -ta``, ``slurm_rpm_build``) on rpm ones.

Invariant: :func:`slurm_build_rules` yields nothing for a spec whose Slurm is not built by gpuforge,
except a ``slurm.build`` set for another source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.model import Scheduler, SourceMode, Spec
from gpuforge.spec.nodes import Node, resolve_nodes
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.slurm_model import GpuAutodetect
from gpuforge.spec.slurm_packages import SlurmSource
from gpuforge.spec.slurm_tarballs import tarball, upstream_version

#: A package version of SchedMD's packaging: ``<major>.<minor>.<micro>-<revision>``.
DEB_VERSION = re.compile(r"^\d{2}\.\d{2}\.\d+-[0-9A-Za-z.+~]+$")


def platform_key(n: Node) -> str:
    """The platform a build is made for: OS release and architecture (``debian12-x86_64``)."""
    return f"{n.os.value}-{n.arch.value}"


def slurm_nodes(spec: Spec) -> list[Node]:
    """The nodes that install Slurm's packages."""
    return [n for n in resolve_nodes(spec) if "slurm" in deploys_for(n)]


def build_hosts(spec: Spec) -> dict[str, Node]:
    """Platform key -> its build host (the first listed of that platform), for a valid spec."""
    s = spec.slurm
    if s is None or s.build is None:
        return {}
    by_name = {n.name: n for n in resolve_nodes(spec)}
    out: dict[str, Node] = {}
    for name in s.build.hosts:
        n = by_name.get(name)
        if n is not None:
            out.setdefault(platform_key(n), n)
    return out


def known_sha256(spec: Spec) -> str | None:
    """The tarball's sha256: the spec's pin, else the cited table's (None: unknown, never used)."""
    s = spec.slurm
    if s is None or s.build is None:
        return None
    if s.build.sha256:
        return s.build.sha256.lower()
    row = tarball(upstream_version(spec.versions.slurm))
    return row.sha256 if row else None


def slurm_build_rules(spec: Spec) -> Iterator[SpecIssue]:
    s = spec.slurm
    if s is None or spec.cluster.scheduler is not Scheduler.SLURM:
        return
    if s.source is not SlurmSource.BUILD:
        if s.build is not None:
            yield SpecIssue(("slurm", "build"), f"slurm.build is read only with slurm.source: build (not {s.source})")
        return
    if s.build is None:
        yield SpecIssue(("slurm", "build"), "slurm.source: build needs slurm.build (the tarball and the build hosts)")
        return
    yield from _version_issues(spec)
    yield from _host_issues(spec)
    gpus = any(g.hardware.gpu for g in spec.node_groups)
    if s.gpu_autodetect is GpuAutodetect.NVML and gpus and not s.build.nvml:
        yield SpecIssue(
            ("slurm", "build", "nvml"),
            "slurm.gpu_autodetect: nvml needs Slurm's NVML plugin (gpu_nvml.so), which the build makes only with "
            "nvml: true (libnvidia-ml-dev from Debian's non-free on deb build hosts; rpmbuild --with nvml and "
            "CUDA's nvml.h on EL build hosts)",
        )


def _version_issues(spec: Spec) -> Iterator[SpecIssue]:
    s = spec.slurm
    assert s is not None and s.build is not None
    version = spec.versions.slurm
    if not DEB_VERSION.match(version):
        yield SpecIssue(
            ("versions", "slurm"),
            f"slurm.source: build needs versions.slurm as the package version of SchedMD's debian/changelog "
            f"(e.g. 24.11.5-1), not {version!r}",
        )
        return
    row = tarball(upstream_version(version))
    if row is not None and version != row.deb_version:
        yield SpecIssue(
            ("versions", "slurm"),
            f"the {row.version} tarball's debian/changelog says {row.deb_version}, not {version}",
        )
    if row is not None and s.build.sha256 and s.build.sha256.lower() != row.sha256:
        yield SpecIssue(
            ("slurm", "build", "sha256"),
            f"differs from the sha256 of Slurm {row.version}'s tarball in gpuforge's cited table ({row.sha256}): "
            "a different file",
        )
    if known_sha256(spec) is None:
        yield SpecIssue(
            ("slurm", "build", "sha256"),
            f"gpuforge's table knows no tarball of Slurm {upstream_version(version)}: pin its sha256 here "
            "(an unknown file is never used)",
        )
    if s.build.tarball is None and (spec.sources.mode is not SourceMode.OFFLINE or not spec.sources.bundle_dir):
        yield SpecIssue(
            ("slurm", "build", "tarball"),
            "where the tarball comes from: a URL here, or sources.mode: offline with sources.bundle_dir "
            "(its artifacts/ folder)",
        )
    if s.build.tarball is None and row is None:
        yield SpecIssue(
            ("slurm", "build", "tarball"),
            "the offline bundle names tarballs by gpuforge's table, which has no row for this release: give a URL",
        )


def _host_issues(spec: Spec) -> Iterator[SpecIssue]:
    s = spec.slurm
    assert s is not None and s.build is not None
    by_name = {n.name: n for n in resolve_nodes(spec)}
    seen: dict[str, str] = {}
    for i, name in enumerate(s.build.hosts):
        n = by_name.get(name)
        if n is None:
            yield SpecIssue(("slurm", "build", "hosts", i), f"{name!r} is not a node of the spec")
            continue
        key = platform_key(n)
        if key in seen:
            yield SpecIssue(
                ("slurm", "build", "hosts", i),
                f"{name} and {seen[key]} are both {key}: one build host per platform",
            )
        seen.setdefault(key, name)
    missing: dict[str, list[str]] = {}
    for n in slurm_nodes(spec):
        if platform_key(n) not in seen:
            missing.setdefault(platform_key(n), []).append(n.name)
    for key, names in sorted(missing.items()):
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        yield SpecIssue(
            ("slurm", "build", "hosts"),
            f"no build host of platform {key}, which Slurm nodes {shown} run: add one of them (packages are "
            "built on the platform they run on)",
        )

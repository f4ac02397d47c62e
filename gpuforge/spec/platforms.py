"""The operating systems and CPU architectures gpuforge deploys to: one data table.

A *platform* is a distribution (``OsFamily``) on a CPU architecture (``Arch``). Everything that
differs between platforms is a field of a row here, never a branch elsewhere: the package format,
NVIDIA's name of the distribution and architecture in its CUDA repository paths (``ubuntu2404`` /
``sbsa``), dpkg's and dnf's architecture names (``arm64`` / ``aarch64``), the Go architecture in
release file names (``linux-arm64``), the kernel headers package, the GNU triplet of multiarch
paths, how the CodeReady Builder repository is enabled. Every row and every name cites where it
comes from (``platform_sources.SOURCES``); ``tests/spec/test_platforms.py`` checks the table.

Adding a platform is one row in :data:`DISTRIBUTIONS` (or one architecture in a row's
``arches``) plus its citations; renderers, deploys, the bundle and the validator read the row.

Invariants: every (distribution, architecture) pair is either in :data:`PLATFORMS` or refused by
:func:`platform_for` with the reason upstream gives; no row names a citation that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuforge.spec.monitoring_packages import DEB_MONITORING, EPEL9_MONITORING, MonitoringPackages


class OsFamily(StrEnum):
    """A distribution release, as the spec names it (``cluster.os``, ``node_groups[].os``)."""

    DEBIAN12 = "debian12"
    DEBIAN13 = "debian13"
    UBUNTU2204 = "ubuntu22.04"
    UBUNTU2404 = "ubuntu24.04"
    RHEL9 = "rhel9"
    ROCKY9 = "rocky9"
    ALMA9 = "alma9"

    @property
    def distribution(self) -> Distribution:
        return DISTRIBUTIONS[self]

    @property
    def is_deb(self) -> bool:
        """apt and dpkg manage its packages (read from the table, not from the name)."""
        return DISTRIBUTIONS[self].package_format is PackageFormat.DEB

    @property
    def is_rpm(self) -> bool:
        return DISTRIBUTIONS[self].package_format is PackageFormat.RPM


class Arch(StrEnum):
    """A CPU architecture, as ``uname -m`` prints it."""

    X86_64 = "x86_64"
    AARCH64 = "aarch64"


class PackageFormat(StrEnum):
    DEB = "deb"
    RPM = "rpm"


@dataclass(frozen=True)
class ArchNames:
    """What each packaging system calls one CPU architecture."""

    arch: Arch
    deb: str  # dpkg --print-architecture
    rpm: str  # dnf's $basearch
    cuda_repo: str  # the directory under .../cuda/repos/<distro>/
    go: str  # GOARCH in release archives (helm-<v>-linux-<go>.tar.gz, dcgm-exporter)
    gnu_triplet: str  # Debian/Ubuntu multiarch directory (/usr/lib/<triplet>/)
    sources: tuple[str, ...]


ARCH_NAMES: dict[Arch, ArchNames] = {
    Arch.X86_64: ArchNames(
        Arch.X86_64, "amd64", "x86_64", "x86_64", "amd64", "x86_64-linux-gnu",
        ("debian-ports", "cuda-repos-x86_64", "go-arch", "debian-multiarch"),
    ),
    Arch.AARCH64: ArchNames(
        Arch.AARCH64, "arm64", "aarch64", "sbsa", "arm64", "aarch64-linux-gnu",
        ("debian-ports", "cuda-repos-sbsa", "go-arch", "debian-multiarch"),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Distribution:
    """One distribution release and what differs about it.

    ``headers`` is the kernel headers (or kernel-devel) package that follows the default kernel
    flavor; ``{deb}`` in it stands for dpkg's architecture name. ``el_major`` is the Enterprise
    Linux major release of RHEL and its rebuilds (EPEL, dnf module streams, ``el8`` rpm builds).
    ``unsupported`` maps an architecture upstream does not serve to the reason.
    """

    os: OsFamily
    title: str
    os_release: tuple[str, str]  # /etc/os-release ID and VERSION_ID (its major part on EL: "9" of "9.4")
    package_format: PackageFormat
    cuda_repo_distro: str
    arches: tuple[Arch, ...]
    headers: str
    sources: tuple[str, ...]
    el_major: int | None = None
    crb: str | None = None  # how the CodeReady Builder repository is enabled (EPEL needs it)
    docker_repo_distro: str | None = None  # download.docker.com/linux/<this>/ (rpm nodes)
    unsupported: tuple[tuple[Arch, str], ...] = ()
    #: The distribution's own archive ships an NVIDIA driver: "debian-nonfree", "ubuntu-archive" or None.
    distro_driver: str | None = None
    #: ``versions.driver.source`` when the spec names none: the distribution's own driver first.
    driver_from_distro_by_default: bool = False
    #: The driver package's nvidia-persistenced unit: StopWhenUnneeded (Debian), --no-persistence-mode (Ubuntu).
    persistenced_stops_when_unneeded: bool = False
    persistenced_without_persistence_mode: bool = False
    #: Where the distribution's Slurm loads plugins from (pyxis goes there); ``{triplet}``: the GNU triplet.
    slurm_plugin_dir: str = "/usr/lib64/slurm"
    #: The NFS server's packages (a node with role storage) and an NFS client's (nodes with nfs mounts).
    nfs_server_packages: tuple[str, ...] = ("nfs-utils",)
    nfs_client_packages: tuple[str, ...] = ("nfs-utils",)
    #: systemd mounts only the unified cgroup hierarchy (cgroup v2) by default: a Slurm older than 22.05
    #: (cgroup/v1 only) cannot run its cgroup plugins there. False: not claimed (no citation checked).
    cgroup_v2_only: bool = False
    #: node-exporter, Prometheus and Alertmanager: their packages, units and argument files (``monitoring_packages``).
    monitoring: MonitoringPackages = DEB_MONITORING
    #: The archive's suite name (Debian: the non-free sources gpuforge adds, the lab's rootfs); None: not used.
    codename: str | None = None
    #: The one NVIDIA driver branch the distribution's own archive carries (``distro_driver`` "debian-nonfree").
    archive_driver_branch: int | None = None
    #: Why NVIDIA's CUDA repository is not used on this release (None: it is): every step that needs it says so.
    cuda_repo_refused: str | None = None


# RHEL: subscription-manager on a registered system; an unregistered one (a cloud image with its own
# repositories) has the rebuilds' crb repository id (NVIDIA/deepops roles/nvidia-dgx/vars/redhat.yml).
_RHEL_CRB = (
    "if command -v subscription-manager >/dev/null 2>&1 && subscription-manager status >/dev/null 2>&1; then "
    'subscription-manager repos --enable "codeready-builder-for-rhel-9-$(arch)-rpms"; '
    "else dnf -y install dnf-plugins-core && dnf config-manager --set-enabled crb; fi"
)
_DEB_SLURM_PLUGINS = "/usr/lib/{triplet}/slurm-wlm"
_BOTH = (Arch.X86_64, Arch.AARCH64)
_UBUNTU = (
    "cuda-repos-index",
    "os-release",
    "cuda-repos-sbsa",
    "ubuntu-headers",
    "debian-slurm-plugins",
    "deb-nfs",
    "ubuntu-cgroup-v2",
)
_EL9 = (
    "cuda-repos-index",
    "os-release",
    "cuda-repos-sbsa",
    "guide-el-distributions",
    "epel-slurm-plugins",
    "el-nfs",
    *EPEL9_MONITORING.sources,
)
_NFSD, _NFS_CLIENT = ("nfs-kernel-server",), ("nfs-common",)  # Debian and Ubuntu (deb-nfs)
_REBUILD_CRB = "dnf -y install dnf-plugins-core && dnf config-manager --set-enabled crb"
_DEBIAN13_ARM = (
    "gpuforge does not serve it: NVIDIA validates Debian 13 on arm64 for Grace systems only (CUDA 13.2 guide: "
    "'GRACE only arm64 systems (sbsa)', not the generic arm64 table); use ubuntu24.04 or rhel9 on aarch64"
)
_DEBIAN13_CUDA = (
    "NVIDIA's debian13 CUDA repository is signed with a new key (8793F200) whose fingerprint gpuforge has not "
    "verified from NVIDIA (only third-party pins), and it carries driver branches from 590 only and no DCGM "
    "(NVIDIA/cuda-repo-management #38, #41); the debian12 repository's SHA1-bound key is rejected by Debian 13's "
    "apt: set versions.driver.source: distro (Debian's own driver, branch 550)"
)
_DEBIAN_ARM = (
    "gpuforge does not serve it: NVIDIA's driver guide documents no debian12 arm64 (sbsa) repository (third-party "
    "reports say debian12/sbsa carries only CUDA 13 / driver 590 and later); use ubuntu24.04, ubuntu22.04 or "
    "rhel9/rocky9/alma9 on aarch64"
)

DISTRIBUTIONS: dict[OsFamily, Distribution] = {
    d.os: d
    for d in (
        Distribution(
            OsFamily.DEBIAN12, "Debian 12 (bookworm)", ("debian", "12"), PackageFormat.DEB, "debian12", (Arch.X86_64,),
            "linux-headers-{deb}",
            ("cuda-repos-index", "os-release", "debian-headers", "debian-slurm-plugins", "deb-nfs"),
            unsupported=((Arch.AARCH64, _DEBIAN_ARM),), distro_driver="debian-nonfree",
            driver_from_distro_by_default=True, persistenced_stops_when_unneeded=True,
            slurm_plugin_dir=_DEB_SLURM_PLUGINS, nfs_server_packages=_NFSD,
            nfs_client_packages=_NFS_CLIENT, codename="bookworm", archive_driver_branch=535,
        ),
        Distribution(
            OsFamily.DEBIAN13, "Debian 13 (trixie)", ("debian", "13"), PackageFormat.DEB, "debian13", (Arch.X86_64,),
            "linux-headers-{deb}",
            ("cuda-repos-index", "os-release", "debian13-release", "debian13-headers", "debian13-slurm-plugins",
             "debian13-nfs", "debian13-nvidia", "debian13-cuda-repo", "debian13-cgroup-v2"),
            unsupported=((Arch.AARCH64, _DEBIAN13_ARM),), distro_driver="debian-nonfree",
            driver_from_distro_by_default=True, slurm_plugin_dir=_DEB_SLURM_PLUGINS, nfs_server_packages=_NFSD,
            nfs_client_packages=_NFS_CLIENT, cgroup_v2_only=True, codename="trixie", archive_driver_branch=550,
            cuda_repo_refused=_DEBIAN13_CUDA,
        ),
        Distribution(
            OsFamily.UBUNTU2204, "Ubuntu 22.04 LTS", ("ubuntu", "22.04"), PackageFormat.DEB, "ubuntu2204", _BOTH,
            "linux-headers-generic", _UBUNTU,
            distro_driver="ubuntu-archive", persistenced_stops_when_unneeded=True,
            persistenced_without_persistence_mode=True, slurm_plugin_dir=_DEB_SLURM_PLUGINS, nfs_server_packages=_NFSD,
            nfs_client_packages=_NFS_CLIENT, cgroup_v2_only=True,
        ),
        Distribution(
            OsFamily.UBUNTU2404, "Ubuntu 24.04 LTS", ("ubuntu", "24.04"), PackageFormat.DEB, "ubuntu2404", _BOTH,
            "linux-headers-generic", _UBUNTU,
            distro_driver="ubuntu-archive", persistenced_stops_when_unneeded=True,
            persistenced_without_persistence_mode=True, slurm_plugin_dir=_DEB_SLURM_PLUGINS, nfs_server_packages=_NFSD,
            nfs_client_packages=_NFS_CLIENT, cgroup_v2_only=True,
        ),
        Distribution(
            OsFamily.RHEL9, "Red Hat Enterprise Linux 9", ("rhel", "9"), PackageFormat.RPM, "rhel9", _BOTH,
            "kernel-devel", (*_EL9, "rhel-crb"),
            monitoring=EPEL9_MONITORING, el_major=9, crb=_RHEL_CRB, docker_repo_distro="rhel",
        ),
        Distribution(
            OsFamily.ROCKY9, "Rocky Linux 9", ("rocky", "9"), PackageFormat.RPM, "rhel9", _BOTH,
            "kernel-devel", (*_EL9, "rebuild-crb", "docker-el-rebuilds"),
            monitoring=EPEL9_MONITORING, el_major=9, crb=_REBUILD_CRB, docker_repo_distro="centos",
        ),
        Distribution(
            OsFamily.ALMA9, "AlmaLinux 9", ("almalinux", "9"), PackageFormat.RPM, "rhel9", _BOTH,
            "kernel-devel", (*_EL9, "rebuild-crb", "docker-el-rebuilds"),
            monitoring=EPEL9_MONITORING, el_major=9, crb=_REBUILD_CRB, docker_repo_distro="centos",
        ),
    )
}  # fmt: skip


@dataclass(frozen=True)
class Platform:
    """A distribution on one CPU architecture: the names every repository and path uses there."""

    distribution: Distribution
    names: ArchNames

    @property
    def os(self) -> OsFamily:
        return self.distribution.os

    @property
    def arch(self) -> Arch:
        return self.names.arch

    @property
    def is_deb(self) -> bool:
        return self.distribution.package_format is PackageFormat.DEB

    @property
    def package_arch(self) -> str:
        """The architecture in package file names and indexes (``arm64`` for dpkg, ``aarch64`` for rpm)."""
        return self.names.deb if self.is_deb else self.names.rpm

    @property
    def cuda_repo_path(self) -> str:
        """``<distro>/<arch>`` under NVIDIA's CUDA repository root (``ubuntu2404/sbsa``)."""
        return f"{self.distribution.cuda_repo_distro}/{self.names.cuda_repo}"

    @property
    def headers_package(self) -> str:
        return self.distribution.headers.format(deb=self.names.deb)

    @property
    def slurm_plugin_dir(self) -> str:
        return self.distribution.slurm_plugin_dir.format(triplet=self.names.gnu_triplet)

    def __str__(self) -> str:
        return f"{self.os.value}/{self.arch.value}"


class UnsupportedPlatform(ValueError):
    """Upstream serves no such distribution and architecture; the message says why."""


PLATFORMS: dict[tuple[OsFamily, Arch], Platform] = {
    (d.os, a): Platform(d, ARCH_NAMES[a]) for d in DISTRIBUTIONS.values() for a in d.arches
}


def platform_for(os: OsFamily, arch: Arch = Arch.X86_64) -> Platform:
    """The row for ``os`` on ``arch``; :class:`UnsupportedPlatform` naming the reason otherwise."""
    found = PLATFORMS.get((os, arch))
    if found is not None:
        return found
    reason = dict(DISTRIBUTIONS[os].unsupported).get(arch, "no upstream repository serves it")
    raise UnsupportedPlatform(f"{DISTRIBUTIONS[os].title} on {arch.value} is not supported: {reason}")

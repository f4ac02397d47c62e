"""Where Slurm's packages come from (``slurm.source``) and what they are called there.

``distro``: the distribution's own Slurm (Debian's and Ubuntu's ``slurm-wlm`` source: ``slurmctld``,
``slurmd``, ``slurmdbd``, ``slurm-client``; plugins in ``/usr/lib/<triplet>/slurm-wlm``). On Enterprise
Linux 9 that is EPEL's ``slurm`` (Fedora's dist-git spec, built for EPEL: ``slurm-slurmctld``,
``slurm-slurmd``, ``slurm-slurmdbd``, the commands and plugins in ``slurm``, headers in ``slurm-devel``;
:data:`EPEL_PACKAGES`), which needs EPEL and CodeReady Builder enabled.

``build``: gpuforge builds SchedMD's packages from the release tarball (``slurm.build``) on a node of
each platform and publishes them to the Slurm nodes as a signed repository; the packages are the
``site`` ones below.

``site``: a repository the site runs (configured on the nodes by the site, e.g. a site Ansible step
or the image), carrying packages built from SchedMD's releases with SchedMD's own packaging: the
``debian/`` directory of SchedMD/slurm makes ``slurm-smd-*`` debs (conflicting with Debian's
``slurm-wlm``), ``slurm.spec`` makes ``slurm-*`` rpms. Their names are in :data:`SITE_PACKAGES`
(cited in :data:`SOURCES`); gpuforge installs and pins those instead.

Invariant: every logical name the deploys ask for (:data:`LOGICAL`) maps, per source and package
format, to a package name or to ``None`` (the files ship in a package installed anyway).
"""

from __future__ import annotations

from enum import StrEnum

from gpuforge.spec.citation import Citation


class SlurmSource(StrEnum):
    DISTRO = "distro"
    SITE = "site"
    BUILD = "build"

    @property
    def schedmd_packaging(self) -> bool:
        """SchedMD's own packaging (``slurm-smd-*`` debs, ``slurm-*`` rpms): a site's repository, or
        gpuforge's build of the release tarball (``gpuforge.orchestrate.slurm_build``)."""
        return self is not SlurmSource.DISTRO


#: The names the deploys use (Debian's), each a role of a package.
LOGICAL = ("slurmctld", "slurmd", "slurmdbd", "slurm-client", "slurm-wlm-nvml-plugin", "libslurm-dev")

#: SchedMD's packaging, by format: logical name -> package (None: no package of its own).
SITE_PACKAGES: dict[str, dict[str, str | None]] = {
    "deb": {
        "slurmctld": "slurm-smd-slurmctld",
        "slurmd": "slurm-smd-slurmd",
        "slurmdbd": "slurm-smd-slurmdbd",
        "slurm-client": "slurm-smd-client",
        "slurm-wlm-nvml-plugin": None,  # gpu_nvml.so is in slurm-smd (every /usr/lib/<triplet>/ plugin)
        "libslurm-dev": "slurm-smd-dev",
    },
    "rpm": {
        "slurmctld": "slurm-slurmctld",
        "slurmd": "slurm-slurmd",
        "slurmdbd": "slurm-slurmdbd",
        "slurm-client": "slurm",  # the base package holds the commands (%{_bindir}/s*)
        "slurm-wlm-nvml-plugin": None,  # %{_libdir}/slurm/*.so is in the base package
        "libslurm-dev": "slurm-devel",
    },
}

#: EPEL's packaging of the distribution's Slurm on EL 9 (Fedora dist-git slurm.spec, ``%{?epel}`` branches):
#: logical name -> package. Fedora builds no NVML plugin (its ``%files`` lists ``gpu_generic.so`` only).
EPEL_PACKAGES: dict[str, str | None] = {
    "slurmctld": "slurm-slurmctld",
    "slurmd": "slurm-slurmd",
    "slurmdbd": "slurm-slurmdbd",
    "slurm-client": "slurm",  # %{_bindir}/sacct ... srun, and %{_libdir}/slurm/*.so
    "slurm-wlm-nvml-plugin": None,
    "libslurm-dev": "slurm-devel",
}

#: The first Slurm major release with a cgroup v2 plugin (``CgroupPlugin=cgroup/v2``); older ones drive
#: proctrack/cgroup and task/cgroup through cgroup v1 only (``slurm-cgroup-v2`` in :data:`SOURCES`).
CGROUP_V2_SINCE = "22.05"

#: apt pin patterns that hold every package of one Slurm build together (``versions.slurm``).
PIN_PATTERNS = {
    SlurmSource.DISTRO: "slurm* libslurm* libpmi0 libpmi2-0 sview",
    SlurmSource.SITE: "slurm-smd*",
    SlurmSource.BUILD: "slurm-smd*",
}

#: What SchedMD's debs open at run time without depending on it, on every node that runs a Slurm daemon
#: or command (``schedmd-pmix-dlopen``): slurm-smd's mpi/pmix plugin (its debian/control builds with
#: libpmix-dev) opens PMIx's unversioned ``libpmix.so``, which only libpmix-dev ships; slurmctld loads the
#: MPI plugins at its start, and srun --mpi=pmix needs it. Not Debian's slurm-wlm-basic-plugins: slurm-smd
#: conflicts with it (``schedmd-debian-control``).
SCHEDMD_DEB_RUNTIME = ("libpmix-dev",)

#: Plugin directory of SchedMD's debs: configure's default libdir (/usr/lib/<triplet>) plus "slurm".
SITE_DEB_PLUGIN_DIR = "/usr/lib/{triplet}/slurm"

SOURCES: dict[str, Citation] = {
    "schedmd-debian-control": Citation(
        "SchedMD/slurm debian/control and debian/*.install (SchedMD's own Debian packaging)",
        "github.com/SchedMD/slurm debian/control, debian/slurm-smd-slurmctld.install, "
        "debian/slurm-smd-client.install, debian/rules (master, 2026-08-20)",
        "'Source: slurm-smd', 'Package: slurm-smd' ('Conflicts: slurm-wlm, slurm-wlm-basic-plugins, ...'), "
        "'Package: slurm-smd-client' ('Depends: ... slurm-smd (= ${binary:Version})', 'Conflicts: slurm-client'), "
        "'Package: slurm-smd-dev', 'Package: slurm-smd-slurmctld', 'Package: slurm-smd-slurmd', "
        "'Package: slurm-smd-slurmdbd'; slurm-smd-slurmctld.install: 'usr/sbin/slurmctld'; "
        "slurm-smd-client.install: 'usr/bin/sacct', 'usr/bin/scontrol' ...; rules: 'dh_auto_configure -- "
        "--sysconfdir=/etc/slurm ...' and 'rm -r debian/tmp/usr/lib/*/slurm/src' (plugins under "
        "/usr/lib/<multiarch>/slurm, all but a few listed into slurm-smd.install)",
    ),
    "schedmd-pmix-dlopen": Citation(
        "SchedMD/slurm auxdir/x_ac_pmix.m4, debian/rules and debian/control; Debian's libpmix-dev file list; "
        "slurmctld's log with gpuforge's build of 24.11.5 on Debian 12 nodes without libpmix-dev",
        "github.com/SchedMD/slurm auxdir/x_ac_pmix.m4, debian/rules, debian/control (master); fabric_packages "
        "debian12-slurm-pmix-dlopen; gpuforge lab run of tests/slurm/test_slurm_build_lab.py, 2026-11-29",
        "x_ac_pmix.m4: '_x_ac_pmix_dirs=\"/usr /usr/local /usr/lib/x86_64-linux-gnu/pmix "
        "/usr/lib/x86_64-linux-gnu/pmix2\"', without rpath "
        "'PMIX_V4_CPPFLAGS=...-DPMIXP_V4_LIBPATH=...\"$x_ac_cv_pmix_libdir\"'; "
        "debian/rules: 'dh_auto_configure -- --sysconfdir=/etc/slurm --disable-debug --with-slurmrestd --with-pmix'; "
        "debian/control: 'Build-Depends: ... libpmix-dev' and 'Package: slurm-smd' 'Depends: ${shlibs:Depends}, "
        "munge' (a dlopened library is not in shlibs); the lab: slurmctld logged 'mpi/pmix_v4: ... can not load "
        "PMIx library' at its start on a node without libpmix-dev, and no such line with it installed "
        "(tests/slurm/test_slurm_build_lab.py)",
    ),
    "schedmd-slurm-spec": Citation(
        "SchedMD/slurm slurm.spec",
        "github.com/SchedMD/slurm slurm.spec (master, 2026-08-20)",
        "'Name: slurm', '%package slurmctld', '%package slurmd', '%package slurmdbd', '%package devel'; "
        "'%files' (base): '%{_bindir}/s*', '%{_libdir}/slurm/*.so'; '%files slurmctld': "
        "'%{_sbindir}/slurmctld'; '%files slurmdbd': '%{_sbindir}/slurmdbd', "
        "'%{_libdir}/slurm/accounting_storage_mysql.so'",
    ),
    "epel-slurm-spec": Citation(
        "Fedora/EPEL slurm package spec (src.fedoraproject.org rpms/slurm, the spec EPEL branches build)",
        "Fedora dist-git slurm.spec as mirrored in github.com/major/fedora-rpm-specs slurm.spec (commit "
        "03cdc8a23d89522350581002bc2f45e71182eae6, Version 22.05.6); trimmed copy with provenance in "
        "tests/platforms/upstream/epel9-slurm-packages.txt",
        "'Name: slurm'; '%package devel', '%package libs', '%package slurmctld', '%package slurmd', "
        "'%package slurmdbd'; '%if (0%{?fedora} >= 34) || (0%{?epel} >= 7)' '%package slurmrestd'; "
        "'# numctl-devel not available in el9 for arch s390x'; 'Requires: munge'; '--sysconfdir=%{_sysconfdir}/"
        "%{name}'; '%files': '%{_bindir}/sbatch', '%{_bindir}/scontrol', '%{_bindir}/srun', "
        "'%{_libdir}/%{name}/cgroup_v2.so', '%{_libdir}/%{name}/gpu_generic.so', '%{_libdir}/%{name}/proctrack_*.so'; "
        "'%files slurmctld': '%{_sbindir}/slurmctld'; '%files slurmd': '%{_sbindir}/slurmd'; '%files slurmdbd': "
        "'%{_sbindir}/slurmdbd', '%{_libdir}/%{name}/accounting_storage_mysql.so'; '%files devel': "
        "'%{_includedir}/%{name}/spank.h'",
    ),
    "slurm-cgroup-v2": Citation(
        "cgroup.conf(5) as Ubuntu ships it: jammy (Slurm 21.08.5) and lunar (Slurm 22.05.8); Slurm's Control "
        "Group v2 plugin page",
        "https://manpages.ubuntu.com/manpages/jammy/en/man5/cgroup.conf.5.html ; "
        "https://manpages.ubuntu.com/manpages/lunar/en/man5/cgroup.conf.5.html ; "
        "https://slurm.schedmd.com/cgroup_v2.html",
        "jammy: 'Provided by: slurm-client_21.08.5-2ubuntu1', 'CgroupAutomount=<yes|no> Slurm cgroup plugins "
        "require valid and functional cgroup subsystem to be mounted under /sys/fs/cgroup/<subsystem_name>' (no "
        "CgroupPlugin=cgroup/v2); lunar: 'Provided by: slurm-client_22.05.8-3', 'In cgroup/v1 this parameter "
        "detects if /sys/fs/cgroup/<controller_name> is available ... In cgroup/v2 this parameter only takes effect "
        "if IgnoreSystemd is set'; cgroup_v2.html: 'The cgroup/v2 plugin is an internal Slurm API used by other "
        "plugins, like proctrack/cgroup, task/cgroup and jobacctgather/cgroup.'",
    ),
    "schedmd-packages-together": Citation(
        "Slurm Upgrade Guide, Upgrade Procedure",
        "https://slurm.schedmd.com/upgrades.html#procedure ; github.com/SchedMD/slurm doc/html/upgrades.shtml",
        "'If RPM/DEB packages are used, all packages present on each system must be upgraded together instead "
        "of piecewise. This is because the packages that contain Slurm daemons and client commands depend on "
        "the general slurm package.'",
    ),
}


def runtime_packages(source: SlurmSource, deb: bool) -> tuple[str, ...]:
    """What the Slurm packages of ``source`` open at run time without depending on it (:data:`SCHEDMD_DEB_RUNTIME`):
    installed with them on every node that runs a Slurm daemon or command. Debian's slurm-wlm needs it only
    with ``MpiDefault=pmix`` (the fabric layer installs it then); EL's packages declare what they need."""
    return SCHEDMD_DEB_RUNTIME if source.schedmd_packaging and deb else ()


def package_for(source: SlurmSource, deb: bool, logical: str) -> str | None:
    """The package of ``logical`` (one of :data:`LOGICAL`) from ``source`` on a deb or rpm node;
    ``None`` where that source ships its files in a package installed anyway."""
    if logical not in LOGICAL:
        raise ValueError(f"{logical!r} is not a Slurm package role ({', '.join(LOGICAL)})")
    if source is SlurmSource.DISTRO:
        return logical if deb else EPEL_PACKAGES[logical]
    return SITE_PACKAGES["deb" if deb else "rpm"][logical]

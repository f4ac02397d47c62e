"""Where Slurm's packages come from (``slurm.source``) and what they are called there.

``distro``: the distribution's own Slurm (Debian's and Ubuntu's ``slurm-wlm`` source: ``slurmctld``,
``slurmd``, ``slurmdbd``, ``slurm-client``; plugins in ``/usr/lib/<triplet>/slurm-wlm``).

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

#: apt pin patterns that hold every package of one Slurm build together (``versions.slurm``).
PIN_PATTERNS = {
    SlurmSource.DISTRO: "slurm* libslurm* libpmi0 libpmi2-0 sview",
    SlurmSource.SITE: "slurm-smd*",
}

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
    "schedmd-slurm-spec": Citation(
        "SchedMD/slurm slurm.spec",
        "github.com/SchedMD/slurm slurm.spec (master, 2026-08-20)",
        "'Name: slurm', '%package slurmctld', '%package slurmd', '%package slurmdbd', '%package devel'; "
        "'%files' (base): '%{_bindir}/s*', '%{_libdir}/slurm/*.so'; '%files slurmctld': "
        "'%{_sbindir}/slurmctld'; '%files slurmdbd': '%{_sbindir}/slurmdbd', "
        "'%{_libdir}/slurm/accounting_storage_mysql.so'",
    ),
    "schedmd-packages-together": Citation(
        "Slurm Upgrade Guide, Upgrade Procedure",
        "https://slurm.schedmd.com/upgrades.html#procedure ; github.com/SchedMD/slurm doc/html/upgrades.shtml",
        "'If RPM/DEB packages are used, all packages present on each system must be upgraded together instead "
        "of piecewise. This is because the packages that contain Slurm daemons and client commands depend on "
        "the general slurm package.'",
    ),
}


def package_for(source: SlurmSource, deb: bool, logical: str) -> str | None:
    """The package of ``logical`` (one of :data:`LOGICAL`) from ``source`` on a deb or rpm node;
    ``None`` where that source ships its files in a package installed anyway."""
    if logical not in LOGICAL:
        raise ValueError(f"{logical!r} is not a Slurm package role ({', '.join(LOGICAL)})")
    if source is SlurmSource.DISTRO:
        return logical if deb else {"libslurm-dev": "slurm-devel"}.get(logical, logical)
    return SITE_PACKAGES["deb" if deb else "rpm"][logical]

"""SchedMD's ``slurm.spec`` built by gpuforge on Enterprise Linux (``slurm.source: build``, rpm platforms).

The release tarball carries SchedMD's ``slurm.spec``; its build options are rpm conditionals
(``%bcond_with``), off unless ``rpmbuild --with <option>`` turns them on, and each adds the
``BuildRequires`` it needs (``schedmd-slurm-spec-options``). gpuforge asks for PMIx, hwloc, UCX, JWT
and YAML always (:data:`WITH`) and NVML with ``slurm.build.nvml`` (:data:`NVML_WITH`); MySQL/MariaDB
accounting needs no option (``BuildRequires: mariadb-devel`` is unconditional on EL).

The build dependencies are read from the spec on the build host with the same options
(``rpmspec -q --buildrequires``, the query ``tests/slurm/upstream/slurm-24.11.5-rpmspec.txt`` recorded)
and installed with dnf, plus :data:`EXTRA_BUILD_DEPENDS`: headers the spec's ``BuildRequires`` do not
name but configure looks for. CodeReady Builder is enabled first, by the platform row's own command
(``Distribution.crb``); ``libjwt-devel`` is EPEL 9's (``epel9-libjwt``), so the build host needs EPEL.

Invariant: the package version of the build is ``versions.slurm`` exactly (``dist`` is defined empty,
so ``Release`` is the spec's ``rel``); every value here is cited in :data:`SOURCES`.
"""

from __future__ import annotations

from gpuforge.spec.citation import Citation

#: ``rpmbuild --with`` options of every rpm build (slurm.spec ``%bcond_with`` names).
WITH = ("pmix", "hwloc", "ucx", "jwt", "yaml")
#: The option that builds the NVML GPU plugin (``slurm.build.nvml``).
NVML_WITH = "nvml"
#: ``rpmbuild --define`` pairs: no ``%{?dist}`` in ``Release``, so the packages are ``versions.slurm``.
DEFINES = (("dist", "%{nil}"),)
#: What the build host needs besides the spec's BuildRequires: rpmbuild and rpmspec, the repository
#: index, bzip2 for the tarball in SchedMD's own layout (``Source: ...tar.bz2``).
BUILD_TOOLS = ("rpm-build", "createrepo_c", "bzip2")
#: Headers configure looks for that the spec's BuildRequires leave out: PMIx's (the spec requires the
#: ``pmix`` package only, configure needs ``include/pmix.h``), json-c's (the JSON serializer; the spec
#: names json-c-devel only for slurmrestd).
EXTRA_BUILD_DEPENDS = ("pmix-devel", "json-c-devel")
#: Where configure finds ``nvml.h`` (the system path, else ``_x_ac_nvml_dirs``): no EL package is cited
#: for it here, so an NVML build needs CUDA's headers and stubs on the build host already.
NVML_HEADERS = ("/usr/include/nvml.h", "/usr/local/cuda/include/nvml.h", "/usr/cuda/include/nvml.h")
#: The binary packages slurm.spec makes with :data:`WITH` (``rpmspec -q --qf '%{name}\\n'``, the fixture).
SPEC_PACKAGES = (
    "slurm", "slurm-perlapi", "slurm-devel", "slurm-example-configs", "slurm-sackd", "slurm-slurmctld",
    "slurm-slurmd", "slurm-slurmdbd", "slurm-libpmi", "slurm-torque", "slurm-openlava", "slurm-contribs",
    "slurm-pam_slurm",
)  # fmt: skip


def rpmbuild_options(nvml: bool) -> list[str]:
    """``--with`` and ``--define`` arguments of ``rpmspec`` and ``rpmbuild`` (one list for both)."""
    args = [a for o in WITH + ((NVML_WITH,) if nvml else ()) for a in ("--with", o)]
    return args + [a for name, value in DEFINES for a in ("--define", f"{name} {value}")]


def source_dir(version: str) -> str:
    """The folder ``%setup -n`` enters and the tarball name ``Source:`` gives, without suffix:
    ``slurm-<version>`` when ``rel`` is 1, else ``slurm-<version>-<rel>`` (``24.11.5-1``)."""
    upstream, rel = version.rsplit("-", 1)
    return f"slurm-{upstream}" if rel == "1" else f"slurm-{upstream}-{rel}"


SOURCES: dict[str, Citation] = {
    "schedmd-slurm-spec-options": Citation(
        "SchedMD/slurm slurm.spec at the release tags (the same file as in Debian's slurm-wlm_24.11.5.orig.tar.gz)",
        "github.com/SchedMD/slurm slurm.spec at tags slurm-24-11-5-1, slurm-25-05-8-1, slurm-26-05-3-1",
        "'Release: %{rel}%{?extraver}%{?dist}', '%bcond_with pmix', '%bcond_with ucx', '%bcond_with hwloc', "
        "'%bcond_with nvml', '%bcond_with jwt', '%bcond_with yaml' ('# These options are only here to force "
        "there to be these on the build. If they are not set they will still be compiled if the packages exist.'); "
        "'%if %{with hwloc} && \"%{_with_hwloc}\" == \"--with-hwloc\"' 'BuildRequires: hwloc-devel'; '%if %{with "
        "pmix} && \"%{_with_pmix}\" == \"--with-pmix\"' 'BuildRequires: pmix' (26.05: 'BuildRequires: "
        "pkgconfig(pmix)'); 'BuildRequires: ucx-devel'; 'BuildRequires: libjwt-devel >= 1.10.0'; 'BuildRequires: "
        "libyaml-devel >= 0.2.5' (25.05, 26.05: '>= 0.1.7'); 'BuildRequires: mariadb-devel >= 5.0.0' (the "
        "default of the MySQL branches); '%if %{with slurmrestd}' ... 'BuildRequires: json-c-devel'; "
        "'Source: %{slurm_source_dir}.tar.bz2', '%global slurm_source_dir %{name}-%{version}' when '\"%{rel}\" "
        "== \"1\"', '%setup -n %{slurm_source_dir}'; '%package slurmctld', '%package slurmd', '%package "
        "slurmdbd', '%package devel'",
    ),
    "schedmd-slurm-configure": Citation(
        "Slurm's configure checks for PMIx and NVML (auxdir/x_ac_pmix.m4, auxdir/x_ac_nvml.m4, 24.11.5)",
        "github.com/SchedMD/slurm auxdir/x_ac_pmix.m4 and auxdir/x_ac_nvml.m4 at tag slurm-24-11-5-1",
        "x_ac_pmix.m4: '_x_ac_pmix_dirs=\"/usr /usr/local ...\"', 'AC_MSG_ERROR([unable to locate pmix "
        "installation])'; x_ac_nvml.m4: 'AC_CHECK_HEADER([nvml.h] ...)', '# Check if libnvml is already in "
        "the system paths', '_x_ac_nvml_dirs=\"/usr/local/cuda /usr/cuda\"', '_x_ac_nvml_libs=\"lib/stubs "
        "lib64/stubs\"'",
    ),
    "schedmd-slurm-rpmspec-query": Citation(
        "rpmspec 4.18 queries of slurm.spec from slurm-wlm_24.11.5.orig.tar.gz (the digest of gpuforge's "
        "table), run for gpuforge on 2026-11-30; rpmbuild -ts of the same tarball in SchedMD's layout",
        "tests/slurm/upstream/slurm-24.11.5-rpmspec.txt",
        "'rpmspec -q --buildrequires --with pmix --with hwloc --with ucx --with jwt --with yaml --with nvml "
        "--define \"dist %{nil}\" slurm.spec' -> 'hwloc-devel', 'libjwt-devel >= 1.10.0', 'libyaml-devel >= "
        "0.2.5', 'mariadb-devel >= 5.0.0', 'munge-devel', 'pmix', 'ucx-devel', ...; 'rpmspec -q --qf "
        "\"%{name} %{version}-%{release}\\n\"' -> 'slurm 24.11.5-1', 'slurm-slurmctld 24.11.5-1', "
        "'slurm-slurmd 24.11.5-1', 'slurm-slurmdbd 24.11.5-1', 'slurm-devel 24.11.5-1', ...; 'rpmbuild -ts' "
        "-> 'slurm-24.11.5-1.src.rpm'",
    ),
    "epel9-libjwt": Citation(
        "Fedora Packages: libjwt-devel, Releases Overview",
        "https://packages.fedoraproject.org/pkgs/libjwt/libjwt-devel/",
        "'libjwt-devel Subpackage of libjwt', 'Fedora EPEL 9 1.12.1-11.el9'",
    ),
}

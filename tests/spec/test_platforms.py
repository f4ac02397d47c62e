"""The platform table (gpuforge/spec/platforms.py) against its citations (gpuforge/spec/platform_sources.py).

The expected values below are written from the citations, not from the table:

* dpkg names amd64/arm64 (``debian-ports``), rpm names x86_64/aarch64 (dnf ``$basearch``:
  ``container-toolkit-arch``, ``docker-rhel-arch``), Go names amd64/arm64 (``go-arch``), GNU
  triplets (``debian-multiarch``);
* NVIDIA's repository directories ``<distro>/x86_64`` and ``<distro>/sbsa`` (``cuda-repos-x86_64``,
  ``cuda-repos-sbsa``) with the codenames debian12, ubuntu2204, ubuntu2404, rhel9
  (``cuda-repos-index``), rhel9 also for Rocky and AlmaLinux (``guide-el-distributions``);
* headers: ``linux-headers-amd64`` (``debian-headers``), ``linux-headers-generic`` on both Ubuntu
  architectures (``ubuntu-headers``); CRB: ``rhel-crb``, ``rebuild-crb``; Slurm's plugin directory
  ``/usr/lib/<triplet>/slurm-wlm`` (``debian-slurm-plugins``), ``/usr/lib64/slurm`` (``epel-slurm-plugins``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuforge.spec import platform_sources, platforms
from gpuforge.spec.citation import Citation
from gpuforge.spec.platforms import (
    ARCH_NAMES,
    DISTRIBUTIONS,
    PLATFORMS,
    Arch,
    OsFamily,
    PackageFormat,
    Platform,
    UnsupportedPlatform,
    platform_for,
)

#: SOURCES keys that no row names, each read elsewhere (platform_sources.OUTSIDE_ROWS says where):
#: per-architecture release-file and repository names built from ArchNames fields, and Docker's
#: repository choice for the rpm distributions (Distribution.docker_repo_distro).
USED_OUTSIDE_ROWS = {
    "container-toolkit-arch",
    "helm-arch",
    "enroot-arch",
    "mig-manager-arch",
    "docker-rhel-arch",
}

#: The keys the brief for the table asked to be cited.
ROW_KEYS = {
    "debian-ports",
    "cuda-repos-x86_64",
    "cuda-repos-sbsa",
    "go-arch",
    "debian-multiarch",
    "cuda-repos-index",
    "debian-headers",
    "ubuntu-headers",
    "guide-el-distributions",
    "rhel-crb",
    "rebuild-crb",
    "debian-slurm-plugins",
    "epel-slurm-plugins",
}

DEB_FAMILIES = {OsFamily.DEBIAN12, OsFamily.DEBIAN13, OsFamily.UBUNTU2204, OsFamily.UBUNTU2404}
RPM_FAMILIES = {OsFamily.RHEL9, OsFamily.ROCKY9, OsFamily.ALMA9}

SUPPORTED = [(os, arch) for os in OsFamily for arch in Arch if arch in DISTRIBUTIONS[os].arches]


def _row_keys() -> set[str]:
    keys = {k for names in ARCH_NAMES.values() for k in names.sources}
    return keys | {k for d in DISTRIBUTIONS.values() for k in d.sources}


# --- citations ------------------------------------------------------------------------------------


def test_every_key_a_row_names_is_cited() -> None:
    missing = {
        (where, key)
        for where, sources in [(str(a), n.sources) for a, n in ARCH_NAMES.items()]
        + [(str(o), d.sources) for o, d in DISTRIBUTIONS.items()]
        for key in sources
        if key not in platform_sources.SOURCES
    }
    assert not missing, f"rows name citations that platform_sources.SOURCES lacks: {sorted(missing)}"


def test_every_citation_is_named_by_a_row_or_listed_as_used_elsewhere() -> None:
    unused = set(platform_sources.SOURCES) - _row_keys() - USED_OUTSIDE_ROWS
    assert not unused, f"citations no row names and USED_OUTSIDE_ROWS does not list: {sorted(unused)}"
    assert set(platform_sources.OUTSIDE_ROWS) == USED_OUTSIDE_ROWS
    assert set(platform_sources.SOURCES) >= USED_OUTSIDE_ROWS


def test_the_cited_keys_are_all_there() -> None:
    assert set(platform_sources.SOURCES) >= ROW_KEYS | USED_OUTSIDE_ROWS


@pytest.mark.parametrize("key", sorted(platform_sources.SOURCES))
def test_each_citation_names_a_place_and_the_words(key: str) -> None:
    c = platform_sources.SOURCES[key]
    assert isinstance(c, Citation)
    assert c.title.strip() and c.where.strip() and c.section.strip()
    assert "http" in c.where or "github.com/" in c.where, c.where
    # the section quotes the source: at least one quoted phrase
    assert "'" in c.section or '"' in c.section, c.section


# --- the table's shape ----------------------------------------------------------------------------


def test_every_os_family_has_exactly_one_row() -> None:
    assert set(DISTRIBUTIONS) == set(OsFamily)
    for os, d in DISTRIBUTIONS.items():
        assert d.os is os
        assert os.distribution is d
    titles = [d.title for d in DISTRIBUTIONS.values()]
    assert len(titles) == len(set(titles))


def test_no_two_rows_in_the_source_share_an_os_family() -> None:
    """DISTRIBUTIONS is a dict built from a tuple of rows: a repeated OsFamily would silently replace the
    earlier row, so the rows are read from the source."""
    tree = ast.parse(Path(platforms.__file__).read_text())
    families: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Distribution":
            first = node.args[0] if node.args else next(k.value for k in node.keywords if k.arg == "os")
            assert isinstance(first, ast.Attribute), ast.dump(first)
            families.append(first.attr)
    assert sorted(families) == sorted(m.name for m in OsFamily)


def test_os_family_is_deb_and_is_rpm_follow_the_table() -> None:
    for os in OsFamily:
        fmt = DISTRIBUTIONS[os].package_format
        assert os.is_deb is (fmt is PackageFormat.DEB)
        assert os.is_rpm is (fmt is PackageFormat.RPM)
        assert os.is_deb != os.is_rpm
    assert {os for os in OsFamily if os.is_deb} == DEB_FAMILIES
    assert {os for os in OsFamily if os.is_rpm} == RPM_FAMILIES


def test_arch_names_rows() -> None:
    assert set(ARCH_NAMES) == set(Arch)
    for arch, names in ARCH_NAMES.items():
        assert names.arch is arch
    x86, arm = ARCH_NAMES[Arch.X86_64], ARCH_NAMES[Arch.AARCH64]
    assert (x86.deb, x86.rpm, x86.cuda_repo, x86.go, x86.gnu_triplet) == (
        "amd64",
        "x86_64",
        "x86_64",
        "amd64",
        "x86_64-linux-gnu",
    )
    assert (arm.deb, arm.rpm, arm.cuda_repo, arm.go, arm.gnu_triplet) == (
        "arm64",
        "aarch64",
        "sbsa",
        "arm64",
        "aarch64-linux-gnu",
    )


def test_cuda_repo_distros() -> None:
    expected = {
        OsFamily.DEBIAN12: "debian12",
        OsFamily.DEBIAN13: "debian13",
        OsFamily.UBUNTU2204: "ubuntu2204",
        OsFamily.UBUNTU2404: "ubuntu2404",
        OsFamily.RHEL9: "rhel9",
        OsFamily.ROCKY9: "rhel9",
        OsFamily.ALMA9: "rhel9",
    }
    assert {os: d.cuda_repo_distro for os, d in DISTRIBUTIONS.items()} == expected


def test_every_pair_is_a_platform_or_refused_with_a_reason() -> None:
    for os, d in DISTRIBUTIONS.items():
        assert d.arches, os
        refused = dict(d.unsupported)
        assert len(refused) == len(d.unsupported), f"{os}: an architecture refused twice"
        for arch in Arch:
            if arch in d.arches:
                assert arch not in refused, f"{os}/{arch} is both served and refused"
                assert (os, arch) in PLATFORMS
            else:
                assert refused.get(arch, "").strip(), f"{os}/{arch} is refused without a reason"
                assert (os, arch) not in PLATFORMS
    assert set(PLATFORMS) == set(SUPPORTED)


def test_rpm_rows_carry_el_major_and_crb_deb_rows_do_not() -> None:
    for os, d in DISTRIBUTIONS.items():
        if os in RPM_FAMILIES:
            assert d.el_major == 9 and d.crb and d.docker_repo_distro
        else:
            assert d.el_major is None and d.crb is None and d.docker_repo_distro is None


# --- platform_for ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("os", "arch"), SUPPORTED, ids=[f"{o.value}-{a.value}" for o, a in SUPPORTED])
def test_platform_for_returns_the_row(os: OsFamily, arch: Arch) -> None:
    p = platform_for(os, arch)
    assert isinstance(p, Platform)
    assert p is PLATFORMS[(os, arch)]
    assert p.os is os and p.arch is arch
    assert p.distribution is DISTRIBUTIONS[os] and p.names is ARCH_NAMES[arch]
    assert p.is_deb is os.is_deb
    assert p.cuda_repo_path == f"{DISTRIBUTIONS[os].cuda_repo_distro}/{ARCH_NAMES[arch].cuda_repo}"
    assert p.package_arch == (ARCH_NAMES[arch].deb if os.is_deb else ARCH_NAMES[arch].rpm)
    assert str(p) == f"{os.value}/{arch.value}"


def test_platform_for_defaults_to_x86_64() -> None:
    assert platform_for(OsFamily.UBUNTU2404) is platform_for(OsFamily.UBUNTU2404, Arch.X86_64)


def test_debian12_on_aarch64_is_refused_with_the_tables_reason() -> None:
    reason = dict(DISTRIBUTIONS[OsFamily.DEBIAN12].unsupported)[Arch.AARCH64]
    with pytest.raises(UnsupportedPlatform) as err:
        platform_for(OsFamily.DEBIAN12, Arch.AARCH64)
    message = str(err.value)
    assert reason in message
    assert "Debian 12" in message and "aarch64" in message
    assert isinstance(err.value, ValueError)


# --- exact rows, from the citations ---------------------------------------------------------------


def test_ubuntu2404_aarch64() -> None:
    p = platform_for(OsFamily.UBUNTU2404, Arch.AARCH64)
    assert p.cuda_repo_path == "ubuntu2404/sbsa"  # cuda-repos-sbsa
    assert p.package_arch == "arm64"  # debian-ports
    assert p.headers_package == "linux-headers-generic"  # ubuntu-headers
    assert p.names.gnu_triplet == "aarch64-linux-gnu"  # debian-multiarch
    assert p.slurm_plugin_dir == "/usr/lib/aarch64-linux-gnu/slurm-wlm"  # debian-slurm-plugins
    assert p.names.go == "arm64"  # go-arch
    assert p.is_deb


def test_ubuntu2204_x86_64_and_aarch64() -> None:
    x86 = platform_for(OsFamily.UBUNTU2204, Arch.X86_64)
    assert (x86.cuda_repo_path, x86.package_arch, x86.headers_package) == (
        "ubuntu2204/x86_64",
        "amd64",
        "linux-headers-generic",
    )
    arm = platform_for(OsFamily.UBUNTU2204, Arch.AARCH64)
    assert (arm.cuda_repo_path, arm.package_arch) == ("ubuntu2204/sbsa", "arm64")


def test_debian12_x86_64() -> None:
    p = platform_for(OsFamily.DEBIAN12, Arch.X86_64)
    assert p.cuda_repo_path == "debian12/x86_64"
    assert p.package_arch == "amd64"
    assert p.headers_package == "linux-headers-amd64"  # debian-headers
    assert p.slurm_plugin_dir == "/usr/lib/x86_64-linux-gnu/slurm-wlm"  # debian-slurm-plugins
    assert p.is_deb


def test_rocky9_x86_64() -> None:
    p = platform_for(OsFamily.ROCKY9, Arch.X86_64)
    assert p.cuda_repo_path == "rhel9/x86_64"  # guide-el-distributions: Rocky Linux 9 | rhel9
    assert p.package_arch == "x86_64"
    assert p.is_deb is False
    assert p.headers_package == "kernel-devel"
    assert p.slurm_plugin_dir == "/usr/lib64/slurm"  # epel-slurm-plugins
    assert p.distribution.el_major == 9
    assert p.distribution.crb is not None and "--set-enabled crb" in p.distribution.crb  # rebuild-crb


@pytest.mark.parametrize("os", [OsFamily.RHEL9, OsFamily.ROCKY9, OsFamily.ALMA9])
def test_el9_on_aarch64_uses_rhel9_sbsa(os: OsFamily) -> None:
    p = platform_for(os, Arch.AARCH64)
    assert p.cuda_repo_path == "rhel9/sbsa"
    assert p.package_arch == "aarch64"
    assert not p.is_deb


def test_alma9_uses_the_rebuild_crb_rule() -> None:
    alma = DISTRIBUTIONS[OsFamily.ALMA9]
    assert alma.crb == DISTRIBUTIONS[OsFamily.ROCKY9].crb
    assert alma.crb is not None and "dnf config-manager --set-enabled crb" in alma.crb


def test_rhel9_enables_codeready_builder_with_subscription_manager() -> None:
    crb = DISTRIBUTIONS[OsFamily.RHEL9].crb
    assert crb is not None
    assert "subscription-manager repos --enable" in crb  # rhel-crb
    assert "codeready-builder-for-rhel-9-$(arch)-rpms" in crb


def test_debian_rows_name_their_suite_and_archive_driver_branch() -> None:
    """The Debian rows' codenames are the lab's suites; each archive carries one driver branch (cited)."""
    from gpuforge.lab.plan import LAB_RELEASES

    debian = {os: d for os, d in DISTRIBUTIONS.items() if d.distro_driver == "debian-nonfree"}
    assert {os.value: d.codename for os, d in debian.items()} == LAB_RELEASES
    assert {os: d.archive_driver_branch for os, d in debian.items()} == {OsFamily.DEBIAN12: 535, OsFamily.DEBIAN13: 550}
    assert DISTRIBUTIONS[OsFamily.DEBIAN13].cuda_repo_refused is not None
    assert DISTRIBUTIONS[OsFamily.DEBIAN13].cgroup_v2_only

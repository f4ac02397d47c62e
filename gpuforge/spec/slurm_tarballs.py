"""SchedMD's Slurm release tarballs gpuforge knows the digest of (``slurm.source: build``).

A tarball is used only once its sha256 is known beforehand, as every fetched artifact: from this
table (each row cited) or from the spec's ``slurm.build.sha256`` (the operator's pin). The rows are
the archives of SchedMD's git release tags as Debian's archive carries them for its slurm-wlm source
(``<source>_<version>.orig.tar.gz``): the tree of the tag ``slurm-<major>-<minor>-<micro>-1``, with
SchedMD's own ``debian/`` packaging (``Source: slurm-smd``, first in 23.11) and ``slurm.spec``.

Invariant: a row's ``sha256`` and ``size`` are the ``Checksums-Sha256`` entry of the cited
``Sources`` index, whose own sha256 is the one the suite's ``InRelease`` lists, signed by Debian's
release key (checked with ``gpgv`` against ``debian-archive-keyring``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuforge.spec.citation import Citation


@dataclass(frozen=True)
class SlurmTarball:
    """One release tarball: its file name, size, sha256, top folder and the version its
    ``debian/changelog`` gives SchedMD's packages (what ``versions.slurm`` names)."""

    version: str
    file_name: str
    size: int
    sha256: str
    top_folder: str
    deb_version: str
    citation: str


TARBALLS: dict[str, SlurmTarball] = {
    "24.11.5": SlurmTarball(
        "24.11.5",
        "slurm-wlm_24.11.5.orig.tar.gz",
        9_907_599,
        "e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332",
        "slurm-slurm-24-11-5-1",
        "24.11.5-1",
        "debian-trixie-sources",
    ),
    "26.05.5": SlurmTarball(
        "26.05.5",
        "slurm-wlm_26.05.5.orig.tar.gz",
        9_649_037,
        "42cc1177e14db84a0f1407ed1e01f7d0e5e12a3cb1a12da3ce00d63e17021bb3",
        "slurm-slurm-26-05-5-1",
        "26.05.5-1",
        "debian-forky-sources",
    ),
}

#: Where a tarball of this table lies in a Debian archive (a site's Debian mirror serves it there).
DEBIAN_POOL_PATH = "pool/main/s/slurm-wlm/{file_name}"

SOURCES: dict[str, Citation] = {
    "debian-trixie-sources": Citation(
        "Debian 13 (trixie) main source index, slurm-wlm",
        "http://deb.debian.org/debian/dists/trixie/main/source/Sources.xz (sha256 b449439c113900c8607c1005f7a1ec07"
        "04d0f3b7376ba312b2150c79e4e4e06c as trixie's InRelease lists it, InRelease signed by 'Debian Stable "
        "Release Key (13/trixie)' 41587F7DB8C774BCCF131416762F67A0B2C39DE4; read 2026-11-29)",
        "'Package: slurm-wlm', 'Version: 24.11.5-4+deb13u1', 'Checksums-Sha256:' ' e1a5547edd212c38b5e3230a28413"
        "3f777b32746551f094aaa81cc4af375e332 9907599 slurm-wlm_24.11.5.orig.tar.gz', 'Directory: "
        "pool/main/s/slurm-wlm'; the file's top folder 'slurm-slurm-24-11-5-1/' and its debian/changelog "
        "'slurm-smd (24.11.5-1) UNRELEASED'",
    ),
    "debian-forky-sources": Citation(
        "Debian forky main source index, slurm-wlm",
        "http://deb.debian.org/debian/dists/forky/main/source/Sources.xz (sha256 0de7996de2917b6ba8240941831dd9ec4e"
        "be354bd2a78a0ab1f3e23d52b86dcc as forky's InRelease lists it, InRelease signed by 'Debian Archive "
        "Automatic Signing Key (13/trixie)'; read 2026-11-29)",
        "'Package: slurm-wlm', 'Version: 26.05.5-1', 'Checksums-Sha256:' ' 42cc1177e14db84a0f1407ed1e01f7d0e5e12a"
        "3cb1a12da3ce00d63e17021bb3 9649037 slurm-wlm_26.05.5.orig.tar.gz'. The file itself was not served by "
        "the mirror this table was checked against (HTTP 404 on 2026-11-29), so its top folder and changelog "
        "version follow the 24.11.5 file's pattern unchecked; the build checks both before it compiles",
    ),
    "schedmd-debian-packaging": Citation(
        "SchedMD/slurm debian/ (SchedMD's own Debian packaging, in the release tarball)",
        "slurm-wlm_24.11.5.orig.tar.gz: slurm-slurm-24-11-5-1/debian/control, debian/rules",
        "control: 'Source: slurm-smd', 'Build-Depends: bash-completion, debhelper (>= 12), dh-exec, ... "
        "libhwloc-dev, ... libjson-c-dev, libjwt-dev, ... libmariadb-dev | libmysqlclient-dev, libmunge-dev, ... "
        "libpmix-dev, ... libyaml-dev, ...'; rules: 'dh_auto_configure -- --sysconfdir=/etc/slurm "
        "--disable-debug --with-mysql_config --with-slurmrestd --with-pmix --enable-pam ...'",
    ),
    "slurm-nvml-configure": Citation(
        "Slurm's configure check for NVML, auxdir/x_ac_nvml.m4 (24.11.5)",
        "slurm-wlm_24.11.5.orig.tar.gz: slurm-slurm-24-11-5-1/auxdir/x_ac_nvml.m4",
        "'AC_CHECK_HEADER([nvml.h] ...)', 'AC_CHECK_LIB([nvidia-ml], [nvmlInit] ...)', '# Check if libnvml is "
        "already in the system paths' (so the NVML GPU plugin is built when nvml.h and libnvidia-ml are on the "
        "build host's default paths)",
    ),
    "debian-libnvidia-ml-dev": Citation(
        "Debian non-free binary index, libnvidia-ml-dev",
        "http://deb.debian.org/debian/dists/{bookworm,trixie}/non-free/binary-amd64/Packages.xz (read 2026-11-29)",
        "bookworm: 'Package: libnvidia-ml-dev', 'Source: nvidia-cuda-toolkit (11.8.0-5~deb12u1)'; trixie: "
        "'Package: libnvidia-ml-dev', 'Source: nvidia-cuda-toolkit (12.4.1-2)'",
    ),
}


def tarball(version: str) -> SlurmTarball | None:
    """The cited tarball of Slurm ``version`` (``24.11.5``), or None when gpuforge knows none."""
    return TARBALLS.get(version)


def upstream_version(deb_version: str) -> str:
    """``24.11.5-1`` -> ``24.11.5`` (the release a package version was built from)."""
    return deb_version.split(":", 1)[-1].rsplit("-", 1)[0]

"""The rpm half of ``slurm.source: build``: SchedMD's ``slurm.spec`` built with ``rpmbuild -ta`` on an EL
build host, indexed with ``createrepo_c``, and the node's ``.repo`` file (small pure functions).

The build host gets the verified tarball as ``src.tar.gz`` in its work folder (``render.slurm_build``);
it is unpacked into the folder ``slurm.spec`` names (``%setup -n slurm-<version>``) and packed again as
``slurm-<version>.tar.bz2`` (``Source:``), whatever layout the file came in (Debian's copy of the git
tag has ``slurm-slurm-24-11-5-1/``). The repository that comes back: the rpms at the top and
``repodata/``; gpuforge signs its ``repomd.xml`` (``repomd.xml.asc``), and dnf checks that signature
with the build's key (``repo_gpgcheck=1``): it covers every package's checksum, as in the offline
bundle's repositories (``render.nvidia_sources.dnf_repo_file``).

Invariant: every value in a command below is a constant or quoted (``shlex.quote``).
"""

from __future__ import annotations

import shlex
from typing import Protocol

from gpuforge.spec import slurm_rpm_build as spec_rpm


class BuildInputs(Protocol):
    """What this module reads of a build (``render.slurm_build.BuildInputs``, which imports this module)."""

    @property
    def version(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def nvml(self) -> bool: ...
    @property
    def top_folder(self) -> str | None: ...


KEY = "/etc/pki/rpm-gpg/gpuforge-slurm.asc"
REPO_FILE = "/etc/yum.repos.d/gpuforge-slurm.repo"
REPO_ID = "gpuforge-slurm"
INDEX = "repodata/repomd.xml"


def repo_text(inputs: BuildInputs, repo_on_node: str) -> str:
    """The node's ``.repo`` file for the build's repository: metadata signed by the build's key only."""
    return (
        f"# gpuforge: SchedMD's Slurm {inputs.version} built from its release tarball (slurm.source: build)\n"
        f"[{REPO_ID}]\nname=SchedMD's Slurm {inputs.version} (gpuforge build {inputs.key})\n"
        f"baseurl=file://{repo_on_node}/{inputs.key}\nenabled=1\nrepo_gpgcheck=1\ngpgcheck=0\ngpgkey=file://{KEY}\n"
    )


def _nvml_check(inputs: BuildInputs) -> str:
    if not inputs.nvml:
        return ""
    found = " || ".join(f"[ -f {shlex.quote(p)} ]" for p in spec_rpm.NVML_HEADERS)
    return (
        f"{{ {found}; }} || {{ echo 'rpmbuild --with nvml needs NVIDIA'\"'\"'s nvml.h and libnvidia-ml stubs "
        f"on the build host (one of {' '.join(spec_rpm.NVML_HEADERS)}): install CUDA'\"'\"'s NVML headers "
        "there'; exit 4; }; "
    )


def _version_check(inputs: BuildInputs, spec: str) -> str:
    """The spec's ``Version:`` and ``rel`` are ``versions.slurm`` (exit 3 otherwise)."""
    upstream, rel = inputs.version.rsplit("-", 1)
    got = f"$(sed -n 's/^Version:[[:space:]]*//p' {spec} | head -n1)-$(sed -n 's/^%define rel[[:space:]]*//p' {spec})"
    return (
        f'[ "{got}" = {shlex.quote(f"{upstream}-{rel}")} ] || {{ echo "slurm.spec is not at '
        f'{inputs.version}: {got}"; exit 3; }}; '
    )


def build_script(inputs: BuildInputs, work: str, crb: str, jobs: int | None = None) -> str:
    """The build on an EL build host: unpack in SchedMD's layout, check the spec's version, enable
    CodeReady Builder (``crb``: the platform row's command), install the tools and the spec's
    BuildRequires for the options (``rpmspec -q --buildrequires``), ``rpmbuild -ta``, ``createrepo_c``.

    Exit 3: the tarball is not what it should be; 4: a build dependency cannot be installed
    (dnf's last lines say which); 5: the compile failed (the build log's last lines)."""
    top, folder = inputs.top_folder, spec_rpm.source_dir(inputs.version)
    spec, tarball = f"{folder}/slurm.spec", shlex.quote(f"{folder}.tar.bz2")
    check_top = (
        f'[ "$(tar -tzf src.tar.gz | cut -d/ -f1 | sort -u)" = {shlex.quote(top)} ] || '
        f"{{ echo 'the tarball has not the one top folder {top}'; exit 3; }}; "
        if top
        else ""
    )
    opts = " ".join(shlex.quote(a) for a in spec_rpm.rpmbuild_options(inputs.nvml))
    tools = " ".join(spec_rpm.BUILD_TOOLS + spec_rpm.EXTRA_BUILD_DEPENDS)
    smp = f"-j{jobs}" if jobs else "-j$(nproc)"
    q = shlex.quote
    return (
        f"set -u; cd {q(work)} || exit 3; {check_top}rm -rf {q(folder)} rpmbuild out && mkdir -p {q(folder)} out && "
        f"tar -xzf src.tar.gz -C {q(folder)} --strip-components=1 --no-same-owner || exit 3; "
        f"[ -f {q(spec)} ] || {{ echo 'the tarball has no slurm.spec'; exit 3; }}; {_version_check(inputs, q(spec))}"
        f"{{ {{ {crb}; }} && dnf -y -q install {tools} && "
        f"rpmspec -q --buildrequires {opts} {q(spec)} > buildrequires.txt && "
        "xargs -r -d '\\n' dnf -y -q install < buildrequires.txt; } > deps.log 2>&1 || "
        "{ echo 'build dependencies could not be installed (libjwt-devel is EPEL 9'\"'\"'s: the build host needs "
        "EPEL):'; grep -E 'Error|No match|nothing provides|Problem' deps.log | tail -n 15; exit 4; }; "
        f"{_nvml_check(inputs)}tar -cjf {tarball} {q(folder)} || exit 3; "
        f'rpmbuild -ta {opts} --define "_topdir $PWD/rpmbuild" --define "_smp_mflags {smp}" {tarball} '
        "> build.log 2>&1 || { echo 'rpmbuild failed; the last lines of its log:'; tail -n 40 build.log; exit 5; }; "
        "mv rpmbuild/RPMS/*/*.rpm out/ && createrepo_c --quiet out && ls out"
    )


def download_command(out: str) -> str:
    """The built rpms and their ``repodata/`` as a tar stream on stdout."""
    return f"cd {shlex.quote(out)} && tar -cf - repodata ./*.rpm"

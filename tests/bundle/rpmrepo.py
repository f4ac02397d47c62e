"""A test upstream in the layout of NVIDIA's and Docker's RHEL 9 repositories, built with the real tools.

Tiny real .rpm files (``rpmbuild``), signed with ``rpmsign`` where upstream signs packages (CUDA,
Docker: ``gpgcheck=1``), indexed with ``createrepo_c``; the CUDA repository's driver streams in
``modules.yaml`` added with ``modifyrepo_c`` (NVIDIA/yum-packaging-precompiled-kmod, "Generate
metadata"); the toolkit repository's ``repomd.xml`` signed (``repomd.xml.asc``, ``repo_gpgcheck=1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.bundle.conftest import RepoKey

TOOLS = ("rpmbuild", "rpmsign", "rpmkeys", "createrepo_c", "modifyrepo_c", "dnf", "gpg")


def require_rpm_tools() -> None:
    """Fail (never skip) when the tools scripts/setup.sh installs are missing."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: run scripts/setup.sh (rpm createrepo-c dnf)", pytrace=False)


@dataclass(frozen=True)
class Rpm:
    name: str
    version: str  # version-release
    epoch: int = 0
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # paths the package installs (empty files)

    @property
    def nevra(self) -> str:
        ver, rel = self.version.rsplit("-", 1)
        return f"{self.name}-{self.epoch}:{ver}-{rel}.x86_64"


def _e(v: str) -> str:
    return f"3:{v}"


def driver_rpms(ver: str) -> list[Rpm]:
    """One driver release as NVIDIA's CUDA rhel9 repository ships it (epoch 3; the open
    flavor's metapackage on the driver, its DKMS module and libraries)."""
    full = f"{ver}-1.el9"
    return [
        Rpm("nvidia-open", full, 3, (f"nvidia-driver = {_e(full)}", f"kmod-nvidia-open-dkms = {_e(full)}")),
        Rpm(
            "nvidia-driver",
            full,
            3,
            (f"nvidia-driver-libs(x86-64) = {_e(full)}", "/usr/sbin/nvidia-modprobe", "libc.so.6()(64bit)"),
        ),
        Rpm("nvidia-driver-libs", full, 3, (), (f"nvidia-driver-libs(x86-64) = {_e(full)}",)),
        Rpm("kmod-nvidia-open-dkms", full, 3, ("dkms", "kernel-devel")),
        Rpm("nvidia-modprobe", full, 3, (), (), ("/usr/sbin/nvidia-modprobe",)),
    ]


DCGM = [
    Rpm("datacenter-gpu-manager-exporter", "4.1.3-1", 0, ("datacenter-gpu-manager-4-core",)),
    Rpm("datacenter-gpu-manager-exporter", "4.8.3-1", 0, ("datacenter-gpu-manager-4-core",)),
    Rpm("datacenter-gpu-manager-4-core", "4.2.3-1", 1),
    Rpm("datacenter-gpu-manager-4-core", "4.3.0-1", 1),
    Rpm("datacenter-gpu-manager-4-cuda12", "4.2.3-1", 1, ("datacenter-gpu-manager-4-core = 1:4.2.3-1",)),
    Rpm("datacenter-gpu-manager-4-proprietary", "4.2.3-1", 1, ("datacenter-gpu-manager-4-core = 1:4.2.3-1",)),
    Rpm(
        "datacenter-gpu-manager-4-proprietary-cuda12",
        "4.2.3-1",
        1,
        ("datacenter-gpu-manager-4-proprietary = 1:4.2.3-1", "datacenter-gpu-manager-4-cuda12 = 1:4.2.3-1"),
    ),
]
CUDA_RPMS = driver_rpms("550.163.01") + driver_rpms("550.144.03") + driver_rpms("575.57.08") + DCGM
#: (stream, driver versions) of the nvidia-driver module in the test CUDA repository.
STREAMS = {"550-open": ("550.163.01", "550.144.03"), "575-open": ("575.57.08",), "latest-open": ("575.57.08",)}

CONTAINER_RPMS = [
    Rpm("nvidia-container-toolkit", "1.20.0-1", 0, ("nvidia-container-toolkit-base = 1.20.0-1",)),
    Rpm("nvidia-container-toolkit", "1.21.0-1", 0, ("nvidia-container-toolkit-base = 1.21.0-1",)),
    Rpm("nvidia-container-toolkit-base", "1.20.0-1"),
    Rpm("nvidia-container-toolkit-base", "1.21.0-1"),
    Rpm("libnvidia-container-tools", "1.20.0-1", 0, ("libnvidia-container1(x86-64) >= 1.20.0-1", "libc.so.6()(64bit)")),
    Rpm("libnvidia-container1", "1.20.0-1", 0, (), ("libnvidia-container1(x86-64) = 1.20.0-1",)),
    Rpm("libnvidia-container1", "1.21.0-1", 0, (), ("libnvidia-container1(x86-64) = 1.21.0-1",)),
]
EPEL_RPMS = [
    Rpm("dkms", "3.1.5-1.el9", 0, ("gcc", "kmod")),
    Rpm("parallel", "20241022-1.el9", 0, ("perl-interpreter",)),
    Rpm("slurm-devel", "22.05.9-1.el9", 0, ("slurm = 22.05.9-1.el9",)),
    Rpm("slurm", "22.05.9-1.el9", 0, ("munge-libs",)),
    Rpm("htop", "3.3.0-1.el9"),  # in EPEL, not needed: not bundled
]
DOCKER_RPMS = [Rpm("containerd.io", "1.7.27-3.1.el9", 0, ("container-selinux",))]

SPEC = """\
Name: {name}
Version: {ver}
Release: {rel}
{epoch}Summary: {name} test package
License: MIT
BuildArch: x86_64
{deps}
%description
fake {name} {ver} for gpuforge bundle tests
%install
{install}
%files
{files}
"""


def build_rpm(work: Path, rpm: Rpm) -> Path:
    """A tiny real x86_64 .rpm built with rpmbuild."""
    ver, rel = rpm.version.rsplit("-", 1)
    deps = [f"Requires: {r}" for r in rpm.requires] + [f"Provides: {p}" for p in rpm.provides]
    install = "\n".join(f"mkdir -p %{{buildroot}}{os.path.dirname(f)} && touch %{{buildroot}}{f}" for f in rpm.files)
    text = SPEC.format(
        name=rpm.name,
        ver=ver,
        rel=rel,
        epoch=f"Epoch: {rpm.epoch}\n" if rpm.epoch else "",
        deps="\n".join(deps),
        install=install,
        files="\n".join(rpm.files),
    )
    top = work / "rpmbuild"
    spec = work / f"{rpm.name}-{rpm.version}.spec"
    spec.write_text(text)
    subprocess.run(
        ["rpmbuild", "-bb", "--define", f"_topdir {top}", "--define", "_build_id_links none", str(spec)],
        check=True,
        capture_output=True,
    )
    return top / "RPMS" / "x86_64" / f"{rpm.name}-{rpm.version}.x86_64.rpm"


def sign_rpm(path: Path, key: RepoKey) -> None:
    """``rpmsign --addsign`` with the upstream key (as NVIDIA's README shows)."""
    env = {**os.environ, "GNUPGHOME": str(key.home)}
    subprocess.run(
        [
            "rpmsign",
            "--define",
            "_gpg_name test-upstream",
            "--define",
            "__gpg /usr/bin/gpg",
            "--define",
            "_gpg_sign_cmd_extra_args --batch --pinentry-mode loopback --passphrase ''",
            "--addsign",
            str(path),
        ],
        check=True,
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def module_streams_yaml(
    streams: dict[str, list[Rpm]], default: str, profiles: Callable[[str, list[Rpm]], dict[str, Any]] | None = None
) -> str:
    """modules.yaml of the nvidia-driver module as ``modifyrepo_c`` adds it: one modulemd v2 document
    per stream (its artifacts: the stream's rpms; ``profiles`` by stream, default: nvidia-open) and
    the modulemd-defaults v1 document naming ``default``."""
    docs: list[dict[str, object]] = []
    for stream, rpms in streams.items():
        flavor = "open-dkms" if stream.endswith("-open") else "dkms"
        docs.append(
            {
                "document": "modulemd",
                "version": 2,
                "data": {
                    "name": "nvidia-driver",
                    "stream": stream,
                    "version": 20251101,
                    "context": "00000000",
                    "arch": "x86_64",
                    "summary": f"Nvidia driver for {flavor} branch {stream.split('-')[0]}",
                    "description": "test stream",
                    "license": {"module": ["MIT"]},
                    "profiles": profiles(stream, rpms) if profiles else {"default": {"rpms": ["nvidia-open"]}},
                    "artifacts": {"rpms": sorted({r.nevra for r in rpms})},
                },
            }
        )
    docs.append({"document": "modulemd-defaults", "version": 1, "data": {"module": "nvidia-driver", "stream": default}})
    return yaml.safe_dump_all(docs, explicit_start=True, explicit_end=True, sort_keys=False)


def modules_yaml(rpms: list[Rpm]) -> str:
    """The nvidia-driver module's streams of ``STREAMS`` (their epoch-3 rpms) and its defaults."""
    streams = {
        stream: [r for r in rpms if r.epoch == 3 and any(r.version.startswith(v) for v in versions)]
        for stream, versions in STREAMS.items()
    }
    return module_streams_yaml(streams, "latest-open")


def rpm_repo(
    repo: Path, rpms: list[Rpm], work: Path, key: RepoKey, key_file: str, *, sign: str, modules: str | None = None
) -> None:
    """An upstream rpm-md repository: ``Packages/*.rpm``, ``repodata/`` by createrepo_c, the
    armored key in ``key_file``; ``sign``: "packages" (rpmsign), "metadata" (repomd.xml.asc) or
    anything else (nothing signed); ``modules``: the modules.yaml to add (default: ``STREAMS``'s
    when there are driver packages)."""
    pool = repo / "Packages"
    pool.mkdir(parents=True)
    for r in rpms:
        built = build_rpm(work, r)
        if sign == "packages":
            sign_rpm(built, key)
        shutil.move(built, pool / built.name)
    (repo / key_file).write_bytes(key.armored())
    subprocess.run(["createrepo_c", "--quiet", str(repo)], check=True, capture_output=True)
    if modules is None and any(r.epoch == 3 for r in rpms):
        modules = modules_yaml(rpms)
    if modules is not None:
        (work / "modules.yaml").write_text(modules)
        subprocess.run(
            ["modifyrepo_c", "--mdtype=modules", str(work / "modules.yaml"), str(repo / "repodata")],
            check=True,
            capture_output=True,
        )
    if sign == "metadata":
        data = (repo / "repodata" / "repomd.xml").read_bytes()
        (repo / "repodata" / "repomd.xml.asc").write_bytes(key.gpg("--armor", "--detach-sign", data=data))

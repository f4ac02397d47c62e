"""NVIDIA's CUDA repositories in miniature: per OS, the driver packages of each branch as upstream names,
relates and spells them, each release beside a later point release of its branch (the decoy).

One repository per OS carries every branch, as upstream's does: NVIDIA's flat ``ubuntu2204``,
``ubuntu2404`` and ``debian12`` repositories (``Packages``, ``Filename: ./<file>.deb``) and the
``rhel9`` rpm-md repository whose ``modules.yaml`` lists each branch's ``<b>-open`` / ``<b>-dkms``
stream of the ``nvidia-driver`` module.

Version spelling, as upstream's files are named:

* Ubuntu: the driver's packages ``<v>-0ubuntu1`` (``nvidia-driver-530 (530.30.02-0ubuntu1)``,
  ``libxnvctrl0 570.124.06-0ubuntu1``); the ``cuda-drivers`` metapackages, the fabric manager and
  the pinning packages ``-1`` (``cuda-drivers-530 (530.30.02-1)``, ``nvidia-fabricmanager-535_535.183.01-1``);
* Debian 12: ``<v>-1`` throughout; the branch pinning package ``<b>-<n>`` (``nvidia-driver-pinning-580``
  at ``580-1`` and ``580-5`` in ``debian12/x86_64``);
* RHEL 9: the driver's packages epoch 3, release ``1.el9`` (``kmod-nvidia-latest-dkms-3:535.183.06-1.el8``);
  the fabric manager release ``1`` (``nvidia-fabric-manager-550.90.07-1.x86_64.rpm``), ``cuda-drivers``
  likewise (assumed: no rpm of it was at hand; the pins match ``<version>-*`` either way).

Relations: each flavor's metapackage on the branch's driver, its DKMS module and libraries. The
metapackages require the driver from the branch's first release on (Debian's ``cuda-drivers-580``:
``nvidia-driver (>= 580.65.06)``, nvidia_packages ``nvidia-forum-cuda-drivers-580``; the RHEL ones
are assumed alike): only the pin keeps a later point release out. The RHEL kernel-module packages
both provide ``nvidia-kmod`` (``nvidia-kmod-common-3:515.48.07-1.el8.noarch requires nvidia-kmod =
3:515.48.07``): only the enabled stream decides which one.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tests.bundle.conftest import Deb
from tests.bundle.rpmrepo import Rpm, module_streams_yaml

#: The pins, per branch (the plan matrix's driver versions).
VERSIONS = {535: "535.261.03", 570: "570.195.03", 580: "580.105.08", 590: "590.48.01"}
#: A later point release of each branch: in the repositories, never in a bundle (590.48.99 is made up:
#: 590.48.01 is the only 590 release the driver table knows, and a pin must be one of its releases).
NEWER = {535: "535.274.02", 570: "570.211.01", 580: "580.126.09", 590: "590.48.99"}
#: Each branch's first release: the floor the metapackages' ">=" relations name.
FLOOR = {535: "535.54.03", 570: "570.86.10", 580: "580.65.06", 590: "590.44.01"}
#: NVIDIA's branch pinning package (from 590) at two revisions: apt takes the newest.
PINNING_REVISIONS = ("590-1", "590-2")

OPEN, PROPRIETARY, FABRIC, PINNING = "open", "proprietary", "fabric manager", "pinning"


def _fm_name(b: int, rpm: bool = False) -> str:
    if b >= 580:
        return "nvidia-fabricmanager"
    return "nvidia-fabric-manager" if rpm else f"nvidia-fabricmanager-{b}"


def _nscq_name(b: int) -> str:
    """NSCQ beside the fabric manager (nvidia_packages nscq-cuda-repo): unversioned from 580."""
    return "libnvidia-nscq" if b >= 580 else f"libnvidia-nscq-{b}"


def ubuntu_release(b: int, v: str) -> dict[str, list[Deb]]:
    """One driver release in NVIDIA's ubuntu2204/ubuntu2404 repositories: each flavor's dependency
    tree, the fabric manager, the pinning packages; from 590 the branch leaves the names."""
    d, m = f"{v}-0ubuntu1", f"{v}-1"
    s = "" if b >= 590 else f"-{b}"
    common: list[Deb] = [
        (f"nvidia-kernel-common{s}", d, "", ""),
        (f"libnvidia-compute{s}", d, "libc6 (>= 2.34)", f"libcuda1 (= {v}), libnvidia-ml1 (= {v})"),
        (f"nvidia-utils{s}", d, f"libnvidia-compute{s} (= {d})", ""),
    ]
    driver = f"nvidia-utils{s} (= {d}), libnvidia-compute{s} (= {d})"
    # Below 560 the open flavor has no nvidia-open: nvidia-kernel-open-<b> and cuda-drivers-<b>, whose
    # driver dependency either flavor satisfies (nvidia_packages cuda-local-repo-ubuntu2204-550; the
    # alternative is assumed, no control file of it is at hand).
    old_open = b < 560
    cuda_drivers = f"nvidia-driver{s} (>= {FLOOR[b]})" + (
        f" | nvidia-driver{s}-open (>= {FLOOR[b]})" if old_open else ""
    )
    flavor_meta: list[Deb] = (
        [(f"nvidia-kernel-open{s}", d, f"nvidia-dkms{s}-open (= {d})", ""), (f"cuda-drivers{s}", m, cuda_drivers, "")]
        if old_open
        else [("nvidia-open", d, f"nvidia-driver{s}-open (= {d})", "")]
    )
    open_: list[Deb] = [
        *flavor_meta,
        (f"nvidia-driver{s}-open", d, f"nvidia-dkms{s}-open (= {d}), {driver}", ""),
        (f"nvidia-dkms{s}-open", d, f"dkms, nvidia-kernel-common{s} (= {d}), nvidia-kernel-source{s}-open (= {d})", ""),
        (f"nvidia-kernel-source{s}-open", d, "", ""),
        *common,
    ]
    proprietary: list[Deb] = [
        (f"cuda-drivers{s}", m, cuda_drivers, ""),
        (f"nvidia-driver{s}", d, f"nvidia-dkms{s} (= {d}), {driver}", ""),
        (f"nvidia-dkms{s}", d, f"dkms, nvidia-kernel-common{s} (= {d}), nvidia-kernel-source{s} (= {d})", ""),
        (f"nvidia-kernel-source{s}", d, "", ""),
        *common,
    ]
    return {
        OPEN: open_,
        PROPRIETARY: proprietary,
        FABRIC: [(_fm_name(b), m, "", ""), (_nscq_name(b), m, "", "")],
        PINNING: _pinning(b, v),
    }


def debian_release(b: int, v: str) -> dict[str, list[Deb]]:
    """One driver release in NVIDIA's debian12 repository: Debian's package names, the same in every branch."""
    d = f"{v}-1"
    kernel = f"nvidia-kernel-dkms (= {d}) | nvidia-kernel-open-dkms (= {d})"
    common: list[Deb] = [
        ("nvidia-driver", d, f"nvidia-driver-libs (= {d}), {kernel}", ""),
        ("nvidia-driver-libs", d, f"libcuda1 (= {d})", ""),
        ("nvidia-driver-cuda", d, f"libcuda1 (= {d})", ""),
        ("libcuda1", d, "libc6 (>= 2.34)", ""),
        ("firmware-nvidia-gsp", d, "", ""),
    ]
    floor = FLOOR[b]
    open_: list[Deb] = [
        ("nvidia-open", d, f"nvidia-driver (>= {floor}), nvidia-driver-cuda (>= {floor}), "
                           f"nvidia-kernel-open-dkms (>= {floor})", ""),
        ("nvidia-kernel-open-dkms", d, f"dkms, firmware-nvidia-gsp (= {d})", ""),
        *common,
    ]  # fmt: skip
    proprietary: list[Deb] = [
        ("cuda-drivers", d, f"nvidia-driver (>= {floor}), nvidia-driver-cuda (>= {floor}), "
                            f"nvidia-kernel-dkms (>= {floor})", ""),
        ("nvidia-kernel-dkms", d, f"dkms, firmware-nvidia-gsp (= {d})", ""),
        *common,
    ]  # fmt: skip
    return {
        OPEN: open_,
        PROPRIETARY: proprietary,
        FABRIC: [(_fm_name(b), d, "", ""), (_nscq_name(b), d, "", "")],
        PINNING: _pinning(b, v),
    }


def _pinning(b: int, v: str) -> list[Deb]:
    """The branch pinning package (the table installs it from 590) and the per-release one (a decoy)."""
    if b < 590:
        return []
    return [
        *((f"nvidia-driver-pinning-{b}", rev, "", "") for rev in PINNING_REVISIONS),
        (f"nvidia-driver-pinning-{v}", f"{v}-1", "", ""),
    ]


def apt_release(distro: str, b: int, v: str) -> dict[str, list[Deb]]:
    return debian_release(b, v) if distro == "debian12" else ubuntu_release(b, v)


def apt_repo_debs(distro: str, branches: tuple[int, ...] = tuple(VERSIONS)) -> list[Deb]:
    """Every package of ``branches`` (the pin and the later point release) in ``distro``'s repository."""
    out: dict[tuple[str, str], Deb] = {}
    for b in branches:
        for v in (VERSIONS[b], NEWER[b]):
            for debs in apt_release(distro, b, v).values():
                for deb in debs:
                    out.setdefault(deb[:2], deb)
    return list(out.values())


def packages_text(debs: list[Deb]) -> str:
    """A flat repository's ``Packages`` as NVIDIA's index has it (``Filename: ./<file>``, size, checksums)."""
    stanzas = []
    for name, version, depends, provides in debs:
        fname = f"{name}_{version.split(':', 1)[-1]}_amd64.deb"
        lines = [f"Package: {name}", f"Version: {version}", "Architecture: amd64", "Priority: optional"]
        lines += [f"Depends: {depends}"] if depends else []
        lines += [f"Provides: {provides}"] if provides else []
        digest = hashlib.sha256(fname.encode()).hexdigest()
        lines += [f"Filename: ./{fname}", "Size: 1024", f"SHA256: {digest}", f"Description: {name}"]
        stanzas.append("\n".join(lines) + "\n")
    return "\n".join(stanzas)


def apt_bundled(distro: str, b: int, flavor: str, fabric: bool = True) -> dict[str, str]:
    """What the bundle must carry for one driver: the flavor's tree and fabric manager at the pin, the
    newest pinning package revision."""
    rel = apt_release(distro, b, VERSIONS[b])
    got = {name: version for name, version, _, _ in rel[flavor]}
    if fabric:
        got |= {name: version for name, version, _, _ in rel[FABRIC]}
    if rel[PINNING]:
        got[f"nvidia-driver-pinning-{b}"] = PINNING_REVISIONS[-1]
    return got


# --------------------------------------------------------------------------- RHEL 9


def _e(v: str) -> str:
    return f"3:{v}"


def rhel_release(b: int, v: str) -> dict[str, list[Rpm]]:
    """One driver release in NVIDIA's rhel9 repository (rpm names; both flavors share the userspace)."""
    full, floor = f"{v}-1.el9", FLOOR[b]
    common = [
        Rpm(
            "nvidia-driver",
            full,
            3,
            (f"nvidia-driver-libs(x86-64) = {_e(full)}", f"nvidia-kmod-common = {_e(v)}", "libc.so.6()(64bit)"),
        ),
        Rpm("nvidia-driver-libs", full, 3, (), (f"nvidia-driver-libs(x86-64) = {_e(full)}",)),
        Rpm("nvidia-driver-cuda", full, 3, (f"nvidia-driver = {_e(full)}",)),
        Rpm("nvidia-kmod-common", full, 3, (f"nvidia-kmod = {_e(v)}",)),
    ]
    loose = (f"nvidia-driver >= {_e(floor)}", f"nvidia-driver-cuda >= {_e(floor)}")
    open_ = [
        Rpm("nvidia-open", full, 3, (*loose, f"kmod-nvidia-open-dkms >= {_e(floor)}")),
        Rpm("kmod-nvidia-open-dkms", full, 3, ("dkms", "kernel-devel"), (f"nvidia-kmod = {_e(full)}",)),
        *common,
    ]
    proprietary = [
        Rpm("cuda-drivers", f"{v}-1", 0, (*loose, f"nvidia-kmod >= {_e(floor)}")),
        Rpm("kmod-nvidia-latest-dkms", full, 3, ("dkms", "kernel-devel"), (f"nvidia-kmod = {_e(full)}",)),
        *common,
    ]
    return {
        OPEN: open_,
        PROPRIETARY: proprietary,
        FABRIC: [Rpm(_fm_name(b, rpm=True), f"{v}-1"), Rpm(_nscq_name(b), f"{v}-1")],
    }


def rhel_repo_rpms(branches: tuple[int, ...] = tuple(VERSIONS)) -> list[Rpm]:
    out: dict[tuple[str, str], Rpm] = {}
    for b in branches:
        for v in (VERSIONS[b], NEWER[b]):
            for rpms in rhel_release(b, v).values():
                for r in rpms:
                    out.setdefault((r.name, r.version), r)
    return list(out.values())


def rhel_streams(branches: tuple[int, ...] = tuple(VERSIONS)) -> dict[str, list[Rpm]]:
    """The nvidia-driver module's streams: ``<b>-open`` and ``<b>-dkms`` list the branch's releases
    (the fabric manager with them: the ``fm`` profile); ``cuda-drivers`` is in no stream."""
    streams: dict[str, list[Rpm]] = {}
    for b in branches:
        for v in (VERSIONS[b], NEWER[b]):
            rel = rhel_release(b, v)
            for flavor, stream in ((OPEN, f"{b}-open"), (PROPRIETARY, f"{b}-dkms")):
                streams.setdefault(stream, []).extend(r for r in rel[flavor] + rel[FABRIC] if r.name != "cuda-drivers")
    return streams


def rhel_modules_yaml(streams: dict[str, list[Rpm]], default: str) -> str:
    """modules.yaml of NVIDIA's RHEL 9 repository: each stream's profiles name the driver and its
    fabric manager (``fm``)."""

    def profiles(stream: str, rpms: list[Rpm]) -> dict[str, Any]:
        return {
            "default": {"rpms": ["nvidia-driver", "nvidia-driver-cuda"]},
            "fm": {"rpms": sorted({r.name for r in rpms if "fabric" in r.name})},
        }

    return module_streams_yaml(streams, default, profiles)


def rhel_bundled(b: int, flavor: str, fabric: bool = True) -> dict[str, str]:
    """What the bundle must carry (``[epoch:]version-release``) for one driver on RHEL 9."""
    rel = rhel_release(b, VERSIONS[b])
    rpms = rel[flavor] + (rel[FABRIC] if fabric else [])
    return {r.name: (f"{r.epoch}:{r.version}" if r.epoch else r.version) for r in rpms}

"""Packages parsing, dependency resolution within a repository, and what a spec needs (pure)."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuforge.bundle.debian import PackageIndex, parse_packages, render_packages
from gpuforge.bundle.downloads import spec_needs
from gpuforge.bundle.resolve import Pin, Want, resolve
from gpuforge.spec import load_spec, parse_spec
from tests import yaml_text
from tests.helpers import RENDER_ONLY_BUNDLE_FINGERPRINT

REPO = Path(__file__).resolve().parents[2]

INDEX = """\
Package: nvidia-container-toolkit
Version: 1.20.0-1
Architecture: amd64
Depends: nvidia-container-toolkit-base (= 1.20.0-1), libnvidia-container-tools (>= 1.20.0),
 libnvidia-container-tools (<< 2.0.0)
Filename: ./nvidia-container-toolkit_1.20.0-1_amd64.deb
Size: 1000
SHA256: aa
Description: NVIDIA Container toolkit
 Provides tools and utilities to enable GPU support in containers.
 .
 A second paragraph.

Package: nvidia-container-toolkit
Version: 1.21.0-1
Architecture: amd64
Depends: nvidia-container-toolkit-base (= 1.21.0-1)
Filename: ./nvidia-container-toolkit_1.21.0-1_amd64.deb
Size: 1000
SHA256: ab

Package: nvidia-container-toolkit
Version: 1.20.0-1
Architecture: arm64
Filename: ./nvidia-container-toolkit_1.20.0-1_arm64.deb
Size: 1000
SHA256: ac

Package: nvidia-container-toolkit-base
Version: 1.20.0-1
Architecture: amd64
Filename: ./nvidia-container-toolkit-base_1.20.0-1_amd64.deb
Size: 10
SHA256: ba

Package: nvidia-container-toolkit-base
Version: 1.21.0-1
Architecture: amd64
Filename: ./nvidia-container-toolkit-base_1.21.0-1_amd64.deb
Size: 10
SHA256: bb

Package: libnvidia-container-tools
Version: 1.20.0-1
Architecture: amd64
Depends: libnvidia-container1 (>= 1.20.0-1), libc6 (>= 2.34)
Filename: ./libnvidia-container-tools_1.20.0-1_amd64.deb
Size: 10
SHA256: ca

Package: libnvidia-container-tools
Version: 2.1.0-1
Architecture: amd64
Depends: libnvidia-container1 (>= 2.1.0-1)
Filename: ./libnvidia-container-tools_2.1.0-1_amd64.deb
Size: 10
SHA256: cb

Package: libnvidia-container1
Version: 1.20.0-1
Architecture: amd64
Pre-Depends: libc6 (>= 2.34)
Depends: libseccomp2 | libnvidia-seccomp, libcap2
Filename: ./libnvidia-container1_1.20.0-1_amd64.deb
Size: 10
SHA256: da

Package: libnvidia-seccomp
Version: 1.0-1
Architecture: all
Filename: ./libnvidia-seccomp_1.0-1_all.deb
Size: 10
SHA256: ea

Package: datacenter-gpu-manager-4-core
Version: 1:4.2.3-1
Architecture: amd64
Depends: libnvidia-ml1 | libnvidia-ml.so.1
Filename: ./datacenter-gpu-manager-4-core_4.2.3-1_amd64.deb
Size: 10
SHA256: fa

Package: datacenter-gpu-manager-4-core
Version: 1:4.3.0-1
Architecture: amd64
Filename: ./datacenter-gpu-manager-4-core_4.3.0-1_amd64.deb
Size: 10
SHA256: fb

Package: datacenter-gpu-manager-4-proprietary
Version: 1:4.2.3-1
Architecture: amd64
Depends: datacenter-gpu-manager-4-core (= 1:4.2.3-1)
Filename: ./datacenter-gpu-manager-4-proprietary_4.2.3-1_amd64.deb
Size: 10
SHA256: fc

Package: libnvidia-compute-550
Version: 550.163.01-0ubuntu1
Architecture: amd64
Provides: libnvidia-ml1 (= 550.163.01), libcuda1
Filename: ./libnvidia-compute-550_550.163.01-0ubuntu1_amd64.deb
Size: 10
SHA256: 1a

Package: libnvidia-compute-550
Version: 550.170.01-0ubuntu1
Architecture: amd64
Provides: libnvidia-ml1 (= 550.170.01), libcuda1
Filename: ./libnvidia-compute-550_550.170.01-0ubuntu1_amd64.deb
Size: 10
SHA256: 1b
"""

DRIVER_PIN = Pin(("*nvidia*", "libcuda*"), ("550.163.01-*",))
DCGM_PIN = Pin(("datacenter-gpu-manager-4-*",), ("1:4.2.3-*", "4.2.3-*"))
TOOLKIT = [
    Want(p, ("1.20.0-1",))
    for p in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools")
]


def index() -> PackageIndex:
    return PackageIndex(parse_packages(INDEX))


def test_parse_packages_keeps_fields_and_continuations() -> None:
    stanzas = parse_packages(INDEX)
    assert len(stanzas) == 14
    first = stanzas[0]
    assert (first.package, first.version, first.arch) == ("nvidia-container-toolkit", "1.20.0-1", "amd64")
    assert first.get("depends").startswith("nvidia-container-toolkit-base (= 1.20.0-1)")  # names are case-blind
    assert first.get("Description").splitlines() == [
        "NVIDIA Container toolkit",
        " Provides tools and utilities to enable GPU support in containers.",
        " .",
        " A second paragraph.",
    ]
    # Rendering gives back the same text, stanza for stanza.
    assert render_packages(stanzas) == INDEX
    assert parse_packages(render_packages(stanzas))[0].fields == first.fields


def test_index_keeps_amd64_and_all_newest_first() -> None:
    idx = index()
    assert [s.version for s in idx.versions("nvidia-container-toolkit")] == ["1.21.0-1", "1.20.0-1"]
    assert [s.arch for s in idx.versions("libnvidia-seccomp")] == ["all"]
    assert {s.version for s, _ in idx.providers["libnvidia-ml1"]} == {"550.163.01-0ubuntu1", "550.170.01-0ubuntu1"}


def test_pinned_toolkit_and_closure() -> None:
    res = resolve(index(), TOOLKIT)
    assert {n: s.version for n, s in res.selected.items()} == {
        "nvidia-container-toolkit": "1.20.0-1",  # not the newer 1.21.0-1
        "nvidia-container-toolkit-base": "1.20.0-1",
        "libnvidia-container-tools": "1.20.0-1",  # wanted at the pin, satisfies >= 1.20.0 and << 2.0.0
        "libnvidia-container1": "1.20.0-1",  # dependency, found in the repository
        "libnvidia-seccomp": "1.0-1",  # ``libseccomp2 | libnvidia-seccomp``: the first one the repository has
    }
    assert res.required_by["libnvidia-container1"] == "libnvidia-container-tools"
    assert res.external == {
        "libc6 (>= 2.34)": {"libnvidia-container-tools", "libnvidia-container1"},  # Pre-Depends count too
        "libcap2": {"libnvidia-container1"},
    }
    assert res.selected["libnvidia-seccomp"].arch == "all"
    assert res.problems == []


def test_dependency_takes_the_newest_satisfying_version() -> None:
    res = resolve(index(), [Want("nvidia-container-toolkit", ("1.20.0-1",))])
    # Not wanted directly: the dependency ``(>= 1.20.0), (<< 2.0.0)`` rules out 2.1.0-1.
    assert res.selected["libnvidia-container-tools"].version == "1.20.0-1"
    assert res.selected["nvidia-container-toolkit-base"].version == "1.20.0-1"


def test_epoch_pin_and_virtual_package_under_the_driver_pin() -> None:
    wants = [
        Want("datacenter-gpu-manager-4-core", ("1:4.2.3-*", "4.2.3-*")),
        Want("datacenter-gpu-manager-4-proprietary", ("1:4.2.3-*", "4.2.3-*")),
    ]
    res = resolve(index(), wants, [DRIVER_PIN, DCGM_PIN])
    assert res.selected["datacenter-gpu-manager-4-core"].version == "1:4.2.3-1"  # not 1:4.3.0-1
    assert res.selected["datacenter-gpu-manager-4-proprietary"].version == "1:4.2.3-1"
    # libnvidia-ml1 is virtual: its provider at the driver pin, not the newest one.
    assert res.selected["libnvidia-compute-550"].version == "550.163.01-0ubuntu1"
    assert res.external == {}
    # Without the driver pin apt would take the newest provider.
    unpinned = resolve(index(), wants, [DCGM_PIN])
    assert unpinned.selected["libnvidia-compute-550"].version == "550.170.01-0ubuntu1"


def test_dcgm_pin_without_epoch_does_not_match() -> None:
    res = resolve(index(), [Want("datacenter-gpu-manager-4-core", ("4.2.3-*",))])
    assert res.selected == {}
    assert res.problems == [
        "datacenter-gpu-manager-4-core 4.2.3-* is not in the repository (versions there: 1:4.3.0-1, 1:4.2.3-1)"
    ]


def test_unsatisfiable_and_conflicting_dependencies_are_problems() -> None:
    text = """\
Package: a
Version: 1.0
Architecture: amd64
Depends: b (>= 2.0)

Package: b
Version: 1.0
Architecture: amd64

Package: c
Version: 1.0
Architecture: amd64
Depends: d (= 1.0)

Package: e
Version: 1.0
Architecture: amd64
Depends: d (= 2.0)

Package: d
Version: 1.0
Architecture: amd64

Package: d
Version: 2.0
Architecture: amd64
"""
    idx = PackageIndex(parse_packages(text))
    res = resolve(idx, [Want("a")])
    assert res.problems == ["a 1.0 depends on b (>= 2.0): the repository has b: 1.0"]
    assert res.external == {}
    res = resolve(idx, [Want("c"), Want("e")])
    assert res.selected["d"].version == "1.0"
    assert res.problems == ["e 1.0 depends on d (= 2.0): d 1.0 is chosen already"]


def test_needs_of_the_h100_example() -> None:
    spec = load_spec(REPO / "inventories" / "slurm-h100.yaml")
    needs = spec_needs(spec)
    repos = {(fmt, kind): need for (fmt, kind, _), need in needs.repos.items()}
    assert set(repos) == {("apt", "nvidia-cuda"), ("apt", "nvidia-container")}
    cuda = repos[("apt", "nvidia-cuda")]
    assert cuda.url == "http://192.0.2.5/nvidia/cuda/ubuntu2404/x86_64"
    assert len(cuda.nodes) == 64  # every GPU node; no controller, database, login or monitoring node
    assert {w.package: w.versions for w in cuda.wants.values()} == {
        "nvidia-dkms-580-open": ("580.173.02-*",),  # NVIDIA's CUDA-repository names (not Canonical's)
        "nvidia-open": ("580.173.02-*",),
        "nvidia-fabricmanager": ("580.173.02-*",),  # unversioned from 580 (cns-fabricmanager)
        "libnvidia-nscq": ("580.173.02-*",),  # NSCQ beside the fabric manager (nscq-cuda-repo)
        "cuda-toolkit-12-4": (),
        "datacenter-gpu-manager-4-core": ("1:4.6.0-*", "4.6.0-*"),
        "datacenter-gpu-manager-4-cuda13": ("1:4.6.0-*", "4.6.0-*"),  # driver 580: a CUDA 13 driver
        "datacenter-gpu-manager-4-proprietary": ("1:4.6.0-*", "4.6.0-*"),
        "datacenter-gpu-manager-4-proprietary-cuda13": ("1:4.6.0-*", "4.6.0-*"),
        "datacenter-gpu-manager-exporter": ("4.8.3-*",),
        "libnccl2": ("2.27.7-1+cuda12.9",),  # the GPU group's fabric: NCCL at the pinned build
        "libnccl-dev": ("2.27.7-1+cuda12.9",),
    }  # nvidia-mig-manager is no CUDA-repository package: a release file (below)
    assert Pin(("datacenter-gpu-manager-4-*",), ("1:4.6.0-*", "4.6.0-*")) in cuda.pins
    assert Pin(("libnccl2", "libnccl-dev"), ("2.27.7-1+cuda12.9",)) in cuda.pins  # the nodes' NCCL pin
    container = repos[("apt", "nvidia-container")]
    assert {w.package: w.versions for w in container.wants.values()} == {
        p: ("1.20.0-1",)
        for p in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools")
    } | {"libnvidia-container1": ("1.20.0-1",)}
    assert sorted(needs.artifacts) == [
        "enroot+caps_4.1.2-1_amd64.deb",
        "enroot_4.1.2-1_amd64.deb",
        "nvidia-mig-manager_0.15.0-1_amd64.deb",
        "pyxis-0.24.0.tar.gz",
    ]
    assert len(needs.artifacts["enroot_4.1.2-1_amd64.deb"].nodes) == 66  # compute and login nodes
    mig = needs.artifacts["nvidia-mig-manager_0.15.0-1_amd64.deb"]
    assert mig.nodes == ["gpu061", "gpu062", "gpu063", "gpu064"]  # the mig group
    assert mig.artifact.url == "http://192.0.2.5/artifacts/nvidia-mig-manager_0.15.0-1_amd64.deb"
    assert needs.artifacts["pyxis-0.24.0.tar.gz"].artifact.url == "http://192.0.2.5/artifacts/pyxis-0.24.0.tar.gz"


def test_offline_spec_fetches_from_upstream_and_rhel_gets_rpm() -> None:
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"] = {"mode": "offline", "bundle_dir": "bundle", "bundle_fingerprint": RENDER_ONLY_BUNDLE_FINGERPRINT}
    data["node_groups"][5]["os"] = "rhel9"  # the mig group
    needs = spec_needs(parse_spec(yaml_text.dump(data)))
    urls = {(fmt, kind): need.url for (fmt, kind, _), need in needs.repos.items()}
    assert urls == {
        ("apt", "nvidia-cuda"): "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64",
        ("apt", "nvidia-container"): "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
        ("rpm", "nvidia-cuda"): "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64",
        # $basearch and $releasever as the RHEL 9 x86_64 nodes substitute them
        ("rpm", "nvidia-container"): "https://nvidia.github.io/libnvidia-container/stable/rpm/x86_64",
        ("rpm", "docker-ce"): "https://download.docker.com/linux/rhel/9/x86_64/stable",  # containerd.io
        ("rpm", "epel"): "https://dl.fedoraproject.org/pub/epel/9/Everything/x86_64",  # dkms, parallel, slurm-devel
    }
    # Every repository's key must be upstream's cited one (the bundle is fetched from upstream).
    assert {(fmt, kind): need.fingerprint for (fmt, kind, _), need in needs.repos.items()} == {
        ("apt", "nvidia-cuda"): "EB693B3035CD5710E231E123A4B469963BF863CC",  # cuda-repo-key
        ("apt", "nvidia-container"): "C95B321B61E88C1809C4F759DDCAE044F796ECB0",  # container-repo-key
        ("rpm", "nvidia-cuda"): "610C7B14E068A878070DA4E99CD0A493D42D0685",  # cuda-rpm-key
        ("rpm", "nvidia-container"): "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        ("rpm", "docker-ce"): "060A61C51B558A7F742B77AAC52FEB6B621E9F35",  # docker-rhel-key
        ("rpm", "epel"): "FF8AD1344597106ECE813B918A3872BF3228467C",  # epel9-key
    }
    epel = next(n for (fmt, kind, _), n in needs.repos.items() if kind == "epel")
    assert list(epel.wants) == ["dkms", "parallel", "slurm-devel"]
    assert epel.key_url == "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9"
    cuda = next(n for (fmt, kind, _), n in needs.repos.items() if (fmt, kind) == ("rpm", "nvidia-cuda"))
    assert cuda.module_streams == {("nvidia-driver", "580-open")}  # what the nodes' dnf enables (driver 580, open)
    assert cuda.key_url == "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub"
    docker = next(n for (fmt, kind, _), n in needs.repos.items() if kind == "docker-ce")
    assert list(docker.wants) == ["containerd.io"] and docker.nodes == ["gpu061", "gpu062", "gpu063", "gpu064"]
    assert needs.artifacts["pyxis-0.24.0.tar.gz"].artifact.url == (
        "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"
    )
    assert "enroot-4.1.2-1.el8.x86_64.rpm" in needs.artifacts
    # dcgm-exporter is the CUDA repository's datacenter-gpu-manager-exporter, not a release file.
    assert not any(name.startswith("dcgm-exporter") for name in needs.artifacts)

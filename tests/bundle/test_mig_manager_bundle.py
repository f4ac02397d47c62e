"""``gpuforge bundle`` end to end from upstream's own layout: nvidia-mig-manager and enroot as GitHub
release files, the driver from NVIDIA's CUDA repository, one run per OS family.

``sources.mode: upstream``, with every upstream host served from 127.0.0.1: the loopback server's
tree is ``<host>/<path>`` of each URL gpuforge names (``github.com/NVIDIA/mig-parted/releases/download/
v<v>/<file>``, ``developer.download.nvidia.com/compute/cuda/repos/<distro>/x86_64/``, ...), and the
URL constants are pointed at it for the run (the CLI in this process), the cited key fingerprints at
the test key. Nothing else changes: the bundle builds the URLs, checks the signatures, resolves the
pins and records the files as it does against upstream.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuforge import cli
from gpuforge.bundle.downloads import spec_needs
from gpuforge.bundle.layout import RPM_RELEASEVER
from gpuforge.bundle.verify import verify_bundle
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec import parse_spec
from gpuforge.spec.model import OsFamily
from gpuforge.spec.platforms import ARCH_NAMES, Arch, platform_for
from tests.bundle import nvidia_repos as repos
from tests.bundle.conftest import CONTAINER_DEBS, RepoKey, Server, build_deb, flat_repo
from tests.bundle.rpmrepo import CONTAINER_RPMS, DOCKER_RPMS, EPEL_RPMS, Rpm, build_rpm, require_rpm_tools, rpm_repo
from tests.helpers import jammy_tracking

MIG = "0.9.1"
MIG_DEB = "nvidia-mig-manager_0.9.1-1_amd64.deb"
MIG_RPM = "nvidia-mig-manager-0.9.1-1.x86_64.rpm"
MIG_RELEASE = "/github.com/NVIDIA/mig-parted/releases/download/v0.9.1"  # the release's assets, on loopback
ENROOT_RELEASE = "/github.com/NVIDIA/enroot/releases/download/v4.1.2"
PYXIS_TAG = "/github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"

SPEC = """\
cluster: {{name: migb, scheduler: slurm, os: {os}}}
sources: {sources}
versions:
  driver: {{version: {version}, flavor: {flavor}, source: nvidia}}
  container_toolkit: 1.20.0
  enroot: 4.1.2
  pyxis: 0.24.0
  mig_manager: {mig}
node_groups:
  - name: ctl
    hosts: ctl01
    roles: [controller, accounting-db]
  - name: hgx
    hosts: gpu[01-02]
    roles: [compute]
    hardware: &hgx
      gpu: {{model: H100-80GB, count: 8}}
      nvswitch: true
      sockets: 1
      cores_per_socket: 4
      threads_per_core: 1
      real_memory_mb: 8000
  - name: mig
    hosts: gpu[03-04]
    roles: [compute]
    hardware: *hgx
    mig_config: inference
container_runtime: {{engine: containerd, cdi: true}}
dcgm: {{enabled: false}}
mig:
  configs:
    inference:
      - devices: [0, 1, 2, 3, 4, 5, 6, 7]
        mig_devices: {{"1g.10gb": 7}}
slurm:
  gpu_autodetect: nvml  # the MIG group needs it (gpuforge.spec.slurm_gpu)
  partitions: [{{name: gpu, nodes: hgx, default: true}}, {{name: mig, nodes: mig}}]
"""


def spec_text(os_name: str, b: int, flavor: str, pins: dict[str, str] | None = None) -> str:
    """The MIG spec from upstream; ``pins``: the sha256 of the release files (none is published)."""
    listed = ", ".join(f"{name}: {sha}" for name, sha in sorted((pins or {}).items()))
    sources = f"{{mode: upstream, artifact_sha256: {{{listed}}}}}"
    return SPEC.format(os=os_name, version=repos.VERSIONS[b], flavor=flavor, sources=sources, mig=MIG) + jammy_tracking(
        os_name
    )


def served(server: Server, url: str) -> Path:
    """Where a (loopback) upstream URL's file lies in the served tree, with the values the nodes substitute."""
    x86 = ARCH_NAMES[Arch.X86_64]
    for var, value in (("$(ARCH)", x86.deb), ("$basearch", x86.rpm), ("$releasever", RPM_RELEASEVER)):
        url = url.replace(var, value)
    assert url.startswith(f"{server.url}/"), url
    return server.root / url.removeprefix(f"{server.url}/")


@pytest.fixture
def loopback(tmp_path: Path, repo_key: RepoKey, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A server for the upstream hosts' tree (filled by the test), every upstream URL pointed at it."""
    root = tmp_path / "upstream"
    root.mkdir()
    server = Server(root)
    server.start()
    for name in list(os.environ):
        if "proxy" in name.lower():
            monkeypatch.delenv(name)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")

    def on_loopback(url: str) -> str:
        parts = urllib.parse.urlsplit(url)
        return f"{server.url}/{parts.netloc}{parts.path}"

    for name in ("CUDA_UPSTREAM", "CONTAINER_UPSTREAM", "ENROOT_RELEASES", "PYXIS_TAGS"):
        monkeypatch.setattr(src, name, on_loopback(getattr(src, name)))
    for name in ("MIG_PARTED_RELEASES", "EPEL_BASEURL", "EPEL_GPGKEY", "DOCKER_RHEL_BASEURL", "DOCKER_RHEL_GPGKEY"):
        monkeypatch.setattr(table, name, on_loopback(getattr(table, name)))
    for kind in ("nvidia-cuda", "nvidia-container"):  # upstream mode requires the cited fingerprints
        monkeypatch.setitem(table.APT_REPO_FINGERPRINTS, kind, repo_key.fingerprint)
    for kind in ("nvidia-cuda", "nvidia-container", "docker-ce", "epel"):
        monkeypatch.setitem(table.RPM_REPO_FINGERPRINTS, kind, repo_key.fingerprint)
    try:
        yield server
    finally:
        server.stop()


def place(server: Server, url: str, data: bytes) -> None:
    path = served(server, url)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def release_files(server: Server, enroot: tuple[str, ...], mig_name: str, mig: bytes) -> dict[str, str]:
    """The GitHub release assets: nvidia-mig-manager, enroot's packages, pyxis' tag archive; the
    sha256 of each, as the operator pins them (``sources.artifact_sha256``: none is published)."""
    files = {mig_name: mig, "pyxis-0.24.0.tar.gz": b"fake pyxis 0.24.0\n"}
    place(server, f"{table.MIG_PARTED_RELEASES}/v{MIG}/{mig_name}", mig)
    for name in enroot:
        files[name] = f"fake {name}\n".encode()
        place(server, f"{src.ENROOT_RELEASES}/v4.1.2/{name}", files[name])
    place(server, f"{src.PYXIS_TAGS}/v0.24.0.tar.gz", files["pyxis-0.24.0.tar.gz"])
    return {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}


def bundle(spec_file: Path, out: Path) -> tuple[int, str]:
    """``gpuforge bundle SPEC -o OUT`` (in this process, where the upstream URLs point at the loopback)."""
    result = CliRunner().invoke(cli.app, ["bundle", str(spec_file), "-o", str(out)])
    return result.exit_code, result.output


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return data


def check_mig_manager(out: Path, server: Server, name: str, served: bytes, spec: str, os_family: OsFamily) -> None:
    """The release file is in the bundle byte for byte, listed with its hash and GitHub source; the
    MIG nodes, and only they, install it; an offline spec pushes this very file."""
    assert server.requests.count(f"{MIG_RELEASE}/{name}") == 1
    assert (out / "artifacts" / name).read_bytes() == served
    files = {f["path"]: f for f in manifest(out)["files"]}
    assert files[f"artifacts/{name}"] == {
        "path": f"artifacts/{name}",
        "sha256": hashlib.sha256(served).hexdigest(),
        "size": len(served),
        "source": f"{server.url}{MIG_RELEASE}/{name}",
        "checksum": "sha256 known beforehand: pinned in the spec (sources.artifact_sha256)",
    }
    needs = spec_needs(parse_spec(spec))
    assert needs.artifacts[name].nodes == ["gpu03", "gpu04"]
    without_mig = spec.replace("    mig_config: inference\n", "")
    assert name not in spec_needs(parse_spec(without_mig)).artifacts
    pin = manifest(out)["signing"]["fingerprint"]
    sources = f"sources: {{mode: offline, bundle_dir: {out}, bundle_fingerprint: {pin},"  # the same pins
    offline = parse_spec(spec.replace("sources: {mode: upstream,", sources))
    a = src.mig_manager_artifact(offline, platform_for(os_family))
    assert (a.name, a.local, a.sha256) == (name, str(out / "artifacts" / name), hashlib.sha256(served).hexdigest())


APT_CASES = [
    # (cluster.os, NVIDIA's distro, branch, flavor, branches in the repository)
    ("ubuntu22.04", "ubuntu2204", 580, "proprietary", (570, 580)),  # cuda-drivers-580; fabric manager renamed
    ("debian12", "debian12", 590, "open", (580, 590)),  # Debian's names; the branch pinning package
]


def bundle_complete(
    tmp_path: Path,
    loopback: Server,
    os_name: str,
    branch: int,
    flavor: str,
    release_file: str,
    mig: bytes,
    pins: dict[str, str],
) -> tuple[Path, dict[str, Any]]:
    """``gpuforge bundle`` of the MIG spec for one driver from the loopback upstream: complete, nothing
    missing, and the mig-manager release file in it as released; the bundle folder and its manifest."""
    spec = spec_text(os_name, branch, flavor, pins)
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(spec)
    out = tmp_path / "bundle"
    code, output = bundle(spec_file, out)
    assert code == 0, output
    m = manifest(out)
    assert m["complete"] is True and m["missing"] == [] and m["fetched_from"] == "upstream"
    check_mig_manager(out, loopback, release_file, mig, spec, OsFamily(os_name))
    return out, m


@pytest.mark.parametrize(("os_name", "distro", "branch", "flavor", "branches"), APT_CASES, ids=lambda v: str(v))
def test_apt_bundle_from_upstream_layout(
    loopback: Server, repo_key: RepoKey, tmp_path: Path, os_name: str, distro: str, branch: int, flavor: str,
    branches: tuple[int, ...],
) -> None:  # fmt: skip
    if shutil.which("dpkg-deb") is None:  # Debian's own dpkg: a missing one is a broken machine, never a skip
        pytest.fail("dpkg-deb is not installed", pytrace=False)
    work = tmp_path / "work"
    work.mkdir()
    cuda = served(loopback, f"{src.CUDA_UPSTREAM}/{distro}/x86_64")
    assert cuda == loopback.root / f"developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64"
    flat_repo(cuda, repos.apt_repo_debs(distro, branches), work, gz=True, key=repo_key, key_file=src.CUDA_APT_KEY)
    container = served(loopback, f"{src.CONTAINER_UPSTREAM}/stable/deb/$(ARCH)")
    assert container == loopback.root / "nvidia.github.io/libnvidia-container/stable/deb/amd64"
    flat_repo(container, CONTAINER_DEBS, work, gz=False, key=repo_key, key_file="gpgkey")
    place(loopback, f"{src.CONTAINER_UPSTREAM}/gpgkey", repo_key.armored())
    mig = build_deb(work, "nvidia-mig-manager", f"{MIG}-1", "", "").read_bytes()  # a real .deb, as released
    pins = release_files(loopback, ("enroot_4.1.2-1_amd64.deb", "enroot+caps_4.1.2-1_amd64.deb"), MIG_DEB, mig)
    out, m = bundle_complete(tmp_path, loopback, os_name, branch, flavor, MIG_DEB, mig, pins)
    control = subprocess.run(
        ["dpkg-deb", "-f", str(out / "artifacts" / MIG_DEB), "Package", "Version"], capture_output=True, text=True
    )
    assert control.stdout.split() == ["Package:", "nvidia-mig-manager", "Version:", f"{MIG}-1"]
    # enroot and pyxis: release files from their GitHub paths too
    assert {f"{ENROOT_RELEASE}/enroot_4.1.2-1_amd64.deb", f"{ENROOT_RELEASE}/enroot+caps_4.1.2-1_amd64.deb",
            PYXIS_TAG} <= set(loopback.requests)  # fmt: skip
    assert (out / "artifacts" / "pyxis-0.24.0.tar.gz").read_bytes() == b"fake pyxis 0.24.0\n"
    # The driver: exactly the pinned packages, from the repository of the nodes' distribution.
    cuda_record = next(r for r in m["repositories"] if r["path"] == "apt/nvidia-cuda")
    assert {p["package"]: p["version"] for p in cuda_record["packages"]} == repos.apt_bundled(distro, branch, flavor)
    assert [(s["url"], s["signed_by"]) for s in cuda_record["sources"]] == [
        (f"{src.CUDA_UPSTREAM}/{distro}/x86_64", repo_key.fingerprint)
    ]
    debs = [p for p in loopback.requests if p.endswith(".deb") and "/compute/cuda/" in p]
    assert len(debs) == len(cuda_record["packages"])
    others = {repos.NEWER[branch], *(repos.VERSIONS[b] for b in branches if b != branch)}
    assert not any(v in p for p in debs for v in others)  # no later point release, no other branch
    assert verify_bundle(out, manifest(out)["signing"]["fingerprint"]) == []


def test_rpm_bundle_from_upstream_layout(loopback: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """RHEL 9, proprietary 570: the ``570-dkms`` stream, ``cuda-drivers``, ``nvidia-fabric-manager``
    (hyphenated before 580), the .rpm of nvidia-mig-manager and enroot."""
    require_rpm_tools()
    work = tmp_path / "work"
    work.mkdir()
    branches = (570, 580)
    cuda = served(loopback, f"{src.CUDA_UPSTREAM}/rhel9/x86_64")
    assert cuda == loopback.root / "developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64"
    modules = repos.rhel_modules_yaml(repos.rhel_streams(branches), default="580-open")
    rpm_repo(cuda, repos.rhel_repo_rpms(branches), work, repo_key, src.CUDA_RPM_KEY, sign="packages", modules=modules)
    container = served(loopback, f"{src.CONTAINER_UPSTREAM}/stable/rpm/$basearch")
    rpm_repo(container, CONTAINER_RPMS, work, repo_key, "gpgkey", sign="metadata")
    place(loopback, f"{src.CONTAINER_UPSTREAM}/gpgkey", repo_key.armored())
    docker = served(loopback, table.DOCKER_RHEL_BASEURL)
    assert docker == loopback.root / "download.docker.com/linux/rhel/9/x86_64/stable"
    rpm_repo(docker, DOCKER_RPMS, work, repo_key, "gpg", sign="packages")
    place(loopback, table.DOCKER_RHEL_GPGKEY, repo_key.armored())
    epel = served(loopback, table.EPEL_BASEURL)
    assert epel == loopback.root / "dl.fedoraproject.org/pub/epel/9/Everything/x86_64"
    rpm_repo(epel, EPEL_RPMS, work, repo_key, src.EPEL_KEY, sign="packages")
    place(loopback, table.EPEL_GPGKEY, repo_key.armored())
    mig = build_rpm(work, Rpm("nvidia-mig-manager", f"{MIG}-1")).read_bytes()  # a real .rpm, as released
    enroot = ("enroot-4.1.2-1.el8.x86_64.rpm", "enroot+caps-4.1.2-1.el8.x86_64.rpm")
    pins = release_files(loopback, enroot, MIG_RPM, mig)
    out, m = bundle_complete(tmp_path, loopback, "rhel9", 570, "proprietary", MIG_RPM, mig, pins)
    query = subprocess.run(
        ["rpm", "-qp", "--nosignature", "--qf", "%{NAME} %{VERSION}-%{RELEASE}", str(out / "artifacts" / MIG_RPM)],
        capture_output=True,
        text=True,
    )
    assert query.stdout == f"nvidia-mig-manager {MIG}-1"
    assert {f"{ENROOT_RELEASE}/enroot-4.1.2-1.el8.x86_64.rpm", PYXIS_TAG} <= set(loopback.requests)
    cuda_record = next(r for r in m["repositories"] if r["path"] == "rpm/nvidia-cuda")
    assert {p["package"]: p["version"] for p in cuda_record["packages"]} == repos.rhel_bundled(570, "proprietary")
    assert cuda_record["sources"][0]["checked"] == "each package's signature (rpmkeys)"
    assert {e["dependency"] for e in cuda_record["external"]} == {"dkms", "kernel-devel", "libc.so.6()(64bit)"}
    rpms = [p for p in loopback.requests if p.endswith(".rpm") and "/compute/cuda/" in p]
    assert len(rpms) == len(cuda_record["packages"])
    assert not any(v in p for p in rpms for v in (repos.NEWER[570], repos.VERSIONS[580], repos.NEWER[580]))
    # The bundle's modules.yaml: only the stream the nodes enable (dnf module enable nvidia-driver:570-dkms).
    modules_gz = list((out / "rpm/nvidia-cuda/repodata").glob("*-modules.yaml.gz"))
    assert len(modules_gz) == 1
    container_record = next(r for r in m["repositories"] if r["path"] == "rpm/nvidia-container")
    assert container_record["sources"][0]["signed_by"] == repo_key.fingerprint  # the cited fingerprint, required
    assert verify_bundle(out, manifest(out)["signing"]["fingerprint"]) == []

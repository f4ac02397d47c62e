"""``gpuforge bundle`` for RHEL 9 nodes end to end: real rpm-md repositories on 127.0.0.1 in, a
signed rpm-md bundle out, read by the real ``dnf`` (module streams, ``repo_gpgcheck``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bundle.rpmmd import REPOMD, REPOMD_SIG
from gpuforge.bundle.signing import BUNDLE_RPM_KEY
from gpuforge.bundle.verify import verify_bundle
from gpuforge.render import nvidia_sources as src
from tests.bundle.conftest import ARTIFACTS, RepoKey, Server, run_bundle
from tests.bundle.rpmrepo import (
    CONTAINER_RPMS,
    CUDA_RPMS,
    DOCKER_RPMS,
    Rpm,
    build_rpm,
    require_rpm_tools,
    rpm_repo,
)

CUDA = "rpm/nvidia-cuda"
CONTAINER = "rpm/nvidia-container"
DOCKER = "rpm/docker-ce"
RHEL_ARTIFACTS = ("enroot-3.5.0-1.el8.x86_64.rpm", "enroot+caps-3.5.0-1.el8.x86_64.rpm")

SPEC = """\
cluster: {{name: offl, scheduler: slurm, os: rhel9}}
sources:
  mode: mirror
  mirrors:
    nvidia_cuda: {base}/cuda
    nvidia_container: {base}/container
    docker_ce: {base}/docker
    epel: {base}/epel
    artifacts: {base}/artifacts
versions:
  driver: {{version: 550.163.01, flavor: open, source: nvidia}}
  container_toolkit: 1.17.8
  enroot: 3.5.0
  pyxis: 0.20.0
  dcgm: 4.2.3
  dcgm_exporter: 4.2.3-4.1.3
node_groups:
  - name: ctl
    hosts: ctl01
    roles: [controller, accounting-db]
  - name: gpu
    hosts: gpu[01-02]
    roles: [compute]
    hardware: {{gpu: {{model: H100-80GB, count: 8}}}}
container_runtime: {{engine: containerd, cdi: true}}
slurm:
  partitions: [{{name: gpu, nodes: gpu, default: true}}]
"""

#: What the RHEL nodes install, at the pins, with the closure within each repository.
PINNED = {
    CUDA: {
        "nvidia-open": "3:550.163.01-1.el9",  # the stream's newest is 550.163.01; 575 is another stream
        "nvidia-driver": "3:550.163.01-1.el9",  # requires (=)
        "nvidia-driver-libs": "3:550.163.01-1.el9",  # through its provide nvidia-driver-libs(x86-64)
        "kmod-nvidia-open-dkms": "3:550.163.01-1.el9",
        "nvidia-modprobe": "3:550.163.01-1.el9",  # through a file requirement (/usr/sbin/nvidia-modprobe)
        "datacenter-gpu-manager-4-core": "1:4.2.3-1",  # epoch, not the newer 1:4.3.0-1
        "datacenter-gpu-manager-4-cuda12": "1:4.2.3-1",
        "datacenter-gpu-manager-4-proprietary": "1:4.2.3-1",
        "datacenter-gpu-manager-4-proprietary-cuda12": "1:4.2.3-1",
    },
    CONTAINER: {
        "nvidia-container-toolkit": "1.17.8-1",
        "nvidia-container-toolkit-base": "1.17.8-1",
        "libnvidia-container-tools": "1.17.8-1",
        "libnvidia-container1": "1.17.8-1",  # wanted at the pin, which also meets the tools' ">="
    },
    DOCKER: {"containerd.io": "1.7.27-3.1.el9"},
}
EXTERNAL = {
    CUDA: {
        "dkms": ["kmod-nvidia-open-dkms"],
        "kernel-devel": ["kmod-nvidia-open-dkms"],
        "libc.so.6()(64bit)": ["nvidia-driver"],
    },
    CONTAINER: {"libc.so.6()(64bit)": ["libnvidia-container-tools"]},
    DOCKER: {"container-selinux": ["containerd.io"]},
}


@pytest.fixture(scope="session")
def rpm_upstream(tmp_path_factory: pytest.TempPathFactory, repo_key: RepoKey) -> Path:
    """``cuda/`` (signed packages, modules.yaml, key D42D0685.pub), ``container/`` (signed
    repomd.xml, key gpgkey), ``docker/`` (signed packages, key gpg), ``artifacts/``."""
    require_rpm_tools()
    root = tmp_path_factory.mktemp("rpm-upstream")
    work = tmp_path_factory.mktemp("rpms")
    rpm_repo(root / "cuda", CUDA_RPMS, work, repo_key, src.CUDA_RPM_KEY, sign="packages")
    rpm_repo(root / "container", CONTAINER_RPMS, work, repo_key, "gpgkey", sign="metadata")
    rpm_repo(root / "docker", DOCKER_RPMS, work, repo_key, "gpg", sign="packages")
    (root / "artifacts").mkdir()
    for name, data in ARTIFACTS.items():
        (root / "artifacts" / name).write_bytes(data)
    for name in RHEL_ARTIFACTS:
        (root / "artifacts" / name).write_bytes(b"fake enroot rpm\n")
    return root


@pytest.fixture
def rpm_served(rpm_upstream: Path, tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "served"
    shutil.copytree(rpm_upstream, root)
    server = Server(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return data


def build(served: Server, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(SPEC.format(base=served.url))
    out = tmp_path / "bundle"
    return out, run_bundle(str(spec_file), "-o", str(out))


def dnf(root: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real dnf in an install root of its own, with the bundle's repositories as a RHEL node gets them."""
    repos = root / "yum.repos.d"
    if not repos.is_dir():
        repos.mkdir(parents=True)
        for kind in ("nvidia-cuda", "nvidia-container", "docker-ce"):
            repo = src.Repo(kind, url=str(out / "rpm" / kind), bundle=str(out / "rpm" / kind))
            text = src.dnf_repo_file(repo, f"gpuforge-{kind}", kind).replace(src.BUNDLE_ON_NODE, str(out))
            (repos / f"{kind}.repo").write_text(text)
    conf = root / "dnf.conf"
    conf.write_text(f"[main]\nreposdir={repos}\ncachedir={root / 'cache'}\n")
    cmd = [
        "dnf", "-y", "-c", str(conf), f"--installroot={root / 'sysroot'}", "--releasever=9",
        f"--setopt=reposdir={repos}", "--setopt=module_platform_id=platform:el9", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_rhel_bundle_resolves_fetches_and_signs_rpm_repositories(rpm_served: Server, tmp_path: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    m = manifest(out)
    assert m["complete"] is True and m["missing"] == [], m["missing"]
    repos = {r["path"]: r for r in m["repositories"]}
    assert set(repos) == {CUDA, CONTAINER, DOCKER}
    for path, pinned in PINNED.items():
        got = {p["package"]: p["version"] for p in repos[path]["packages"]}
        assert got == pinned, path
        assert {e["dependency"]: e["required_by"] for e in repos[path]["external"]} == EXTERNAL[path], path
        rpms = sorted(p.name for p in (out / path).glob("*.rpm"))
        assert rpms == sorted(p["path"].rsplit("/", 1)[1] for p in repos[path]["packages"])
    # Trust: the toolkit's signed repomd.xml; CUDA's and Docker's signed packages.
    checked = {path: r["sources"][0]["checked"] for path, r in repos.items()}
    assert checked[CONTAINER] == "repomd.xml.asc" and repos[CONTAINER]["sources"][0]["signed_by"]
    assert checked[CUDA] == checked[DOCKER] == "each package's signature (rpmkeys)"
    assert "checked: each package's signature (rpmkeys)" in cp.stdout
    # The bundle's own metadata: signed with the bundle key, covering every file.
    assert m["signing"]["rpm_key"] == BUNDLE_RPM_KEY and (out / BUNDLE_RPM_KEY).is_file()
    for path in PINNED:
        assert (out / path / REPOMD_SIG).is_file()
    modules = list((out / CUDA / "repodata").glob("*-modules.yaml.gz"))
    assert len(modules) == 1  # only the stream the nodes enable (checked with dnf below)
    assert verify_bundle(out) == []
    for name in RHEL_ARTIFACTS:
        assert (out / "artifacts" / name).is_file()


def test_dnf_reads_the_bundle_as_a_rhel_node_does(rpm_served: Server, tmp_path: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    root = tmp_path / "dnf"
    listed = dnf(root, out, "module", "list", "nvidia-driver")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "550-open" in listed.stdout and "575-open" not in listed.stdout
    enable = dnf(root, out, "module", "enable", "nvidia-driver:550-open")
    assert enable.returncode == 0, enable.stdout + enable.stderr
    # A modular package installs once its stream is enabled; the toolkit at its pin.
    inst = dnf(root, out, "install", "nvidia-driver-libs-550.163.01", "nvidia-container-toolkit-1.17.8")
    assert inst.returncode == 0, inst.stdout + inst.stderr
    q = subprocess.run(
        ["rpm", "--root", str(root / "sysroot"), "-qa", "--qf", "%{NAME}-%{VERSION}\\n"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert set(q.stdout.split()) == {
        "nvidia-driver-libs-550.163.01",
        "nvidia-container-toolkit-1.17.8",
        "nvidia-container-toolkit-base-1.17.8",
    }


def test_dnf_refuses_a_changed_bundle_index(rpm_served: Server, tmp_path: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    repomd = out / CONTAINER / REPOMD
    repomd.write_bytes(repomd.read_bytes().replace(b"<revision>", b"<revision>1"))
    refused = dnf(tmp_path / "dnf", out, "--disablerepo=*", "--enablerepo=gpuforge-nvidia-container", "makecache")
    assert refused.returncode != 0
    assert "GPG signature verification error" in refused.stdout + refused.stderr
    assert any(p.startswith(f"{CONTAINER}/{REPOMD}: ") for p in verify_bundle(out))


def test_a_cuda_package_without_upstream_signature_is_refused(
    rpm_served: Server, tmp_path: Path, repo_key: RepoKey
) -> None:
    """CUDA's metadata is not signed: each package's signature is the chain of trust."""
    cuda = rpm_served.root / "cuda"
    (tmp_path / "work").mkdir()
    unsigned = build_rpm(
        tmp_path / "work",
        Rpm("datacenter-gpu-manager-4-cuda12", "4.2.3-1", 1, ("datacenter-gpu-manager-4-core = 1:4.2.3-1",)),
    )
    shutil.copy(unsigned, cuda / "Packages" / unsigned.name)
    update = ["createrepo_c", "--quiet", "--update", "--keep-all-metadata", str(cuda)]
    subprocess.run(update, check=True, capture_output=True)
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    missing = {x["what"]: x["error"] for x in manifest(out)["missing"]}
    assert set(missing) == {f"{CUDA}: datacenter-gpu-manager-4-cuda12"}
    assert "signature" in missing[f"{CUDA}: datacenter-gpu-manager-4-cuda12"]
    assert not (out / CUDA / unsigned.name).exists()


def test_a_cuda_repository_without_the_driver_stream_is_incomplete(rpm_served: Server, tmp_path: Path) -> None:
    """``dnf module enable nvidia-driver:550-open`` would fail on the nodes: the bundle says so."""
    subprocess.run(
        ["createrepo_c", "--quiet", "--update", str(rpm_served.root / "cuda")], check=True, capture_output=True
    )
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    missing = {x["what"]: x["error"] for x in manifest(out)["missing"]}
    assert missing == {f"{CUDA}: module nvidia-driver:550-open": "the repository's modules.yaml has no such stream"}
    assert not list((out / CUDA / "repodata").glob("*modules*"))


def test_toolkit_metadata_signed_by_another_key_is_refused(rpm_served: Server, tmp_path: Path) -> None:
    other = RepoKey(tmp_path / "other-gnupg", "someone-else")
    try:
        repodata = rpm_served.root / "container" / "repodata"
        sig = other.gpg("--armor", "--detach-sign", data=(repodata / "repomd.xml").read_bytes())
        (repodata / "repomd.xml.asc").write_bytes(sig)
    finally:
        other.close()
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 1
    missing = manifest(out)["missing"]
    assert [x["what"] for x in missing] == [f"{CONTAINER}: repodata"]
    assert "does not verify" in missing[0]["error"]
    assert not any(p.endswith(".rpm") and "/container/" in p for p in rpm_served.requests)


def test_a_rerun_with_no_change_rewrites_nothing(rpm_served: Server, tmp_path: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"}
    first = manifest(out)["signing"]["fingerprint"]
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert " 0 downloaded" in cp.stdout
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert after == before
    assert manifest(out)["signing"]["fingerprint"] == first

"""Bundle test support: tiny real .deb files, flat repositories and a loopback HTTP server.

Every request these tests make goes to 127.0.0.1 (a ``http.server`` on a random port).
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

# name, version, Depends, Provides
Deb = tuple[str, str, str, str]

CONTAINER_DEBS: list[Deb] = [
    (
        "nvidia-container-toolkit",
        "1.20.0-1",
        "nvidia-container-toolkit-base (= 1.20.0-1), libnvidia-container-tools (>= 1.20.0)",
        "",
    ),
    ("nvidia-container-toolkit", "1.17.7-1", "nvidia-container-toolkit-base (= 1.17.7-1)", ""),
    ("nvidia-container-toolkit", "1.21.0-1", "nvidia-container-toolkit-base (= 1.21.0-1)", ""),
    ("nvidia-container-toolkit-base", "1.20.0-1", "", ""),
    ("nvidia-container-toolkit-base", "1.21.0-1", "", ""),
    ("libnvidia-container-tools", "1.20.0-1", "libnvidia-container1 (>= 1.20.0-1), libc6 (>= 2.34)", ""),
    ("libnvidia-container-tools", "1.21.0-1", "libnvidia-container1 (>= 1.21.0-1)", ""),
    ("libnvidia-container1", "1.20.0-1", "libc6 (>= 2.34), libseccomp2 | libcap2", ""),
    ("libnvidia-container1", "1.21.0-1", "libc6 (>= 2.34)", ""),
    ("nvidia-docker2", "2.14.0-1", "nvidia-container-toolkit (>= 1.20.0-1)", ""),
]

DRV = "550.163.01-0ubuntu1"
# Names and relations as in NVIDIA's CUDA repository for ubuntu2404 (Debian-style versions
# "<driver>-0ubuntu1", cuda-drivers "-1"): below 560 the open flavor is the branch's own
# nvidia-kernel-open-550 and nvidia-driver-550-open with cuda-drivers-550, no nvidia-open
# (nvidia_packages cuda-local-repo-ubuntu2204-550; cuda-drivers-550's driver alternatives are
# assumed); dkms and the kernel headers come from Ubuntu's archive (external to this repository).
CUDA_DRIVERS_550 = "nvidia-driver-550 (>= 550.54.14) | nvidia-driver-550-open (>= 550.54.14)"
CUDA_DEBS: list[Deb] = [
    ("nvidia-kernel-open-550", DRV, f"nvidia-dkms-550-open (= {DRV})", ""),
    ("nvidia-kernel-open-550", "550.170.01-0ubuntu1", "nvidia-dkms-550-open (= 550.170.01-0ubuntu1)", ""),
    ("cuda-drivers-550", "550.163.01-1", CUDA_DRIVERS_550, ""),
    ("cuda-drivers-550", "550.170.01-1", CUDA_DRIVERS_550, ""),
    (
        "nvidia-driver-550-open",
        DRV,
        f"nvidia-dkms-550-open (= {DRV}), libnvidia-compute-550 (= {DRV}), nvidia-utils-550 (= {DRV})",
        "",
    ),
    ("nvidia-driver-550-open", "550.144.03-0ubuntu1", "nvidia-dkms-550-open (= 550.144.03-0ubuntu1)", ""),
    ("nvidia-driver-550-open", "550.170.01-0ubuntu1", "nvidia-dkms-550-open (= 550.170.01-0ubuntu1)", ""),
    ("nvidia-dkms-550-open", DRV, f"dkms, nvidia-kernel-common-550 (= {DRV})", ""),
    ("nvidia-dkms-550-open", "550.144.03-0ubuntu1", "dkms", ""),
    ("nvidia-dkms-550-open", "550.170.01-0ubuntu1", "dkms, nvidia-kernel-common-550 (= 550.170.01-0ubuntu1)", ""),
    ("nvidia-kernel-common-550", DRV, "", ""),
    ("nvidia-kernel-common-550", "550.170.01-0ubuntu1", "", ""),
    ("nvidia-utils-550", DRV, f"libnvidia-compute-550 (= {DRV}), libc6 (>= 2.34)", ""),
    ("libnvidia-compute-550", DRV, "", "libcuda1 (= 550.163.01), libnvidia-ml1"),
    ("libnvidia-compute-550", "550.170.01-0ubuntu1", "", "libcuda1 (= 550.170.01)"),
    ("datacenter-gpu-manager-4-core", "1:4.2.3-1", "libc6 (>= 2.34), libnvidia-ml1", ""),
    ("datacenter-gpu-manager-4-core", "1:4.3.0-1", "libc6 (>= 2.34)", ""),
    ("datacenter-gpu-manager-4-proprietary", "1:4.2.3-1", "datacenter-gpu-manager-4-core (= 1:4.2.3-1)", ""),
    ("datacenter-gpu-manager-4-proprietary", "1:4.3.0-1", "datacenter-gpu-manager-4-core (= 1:4.3.0-1)", ""),
    # DCGM 4's CUDA-major packages (CUDA repository Packages: -cuda11/-cuda12/-cuda13, -proprietary-cuda<N>)
    ("datacenter-gpu-manager-4-cuda12", "1:4.2.3-1", "datacenter-gpu-manager-4-core (= 1:4.2.3-1)", ""),
    # -cuda13 exists from DCGM 4.4.0 (NVIDIA/DCGM packaging.cmake: none at v4.3.1, added by v4.4.1)
    ("datacenter-gpu-manager-4-core", "1:4.6.0-1", "libc6 (>= 2.34)", ""),
    ("datacenter-gpu-manager-4-cuda13", "1:4.6.0-1", "datacenter-gpu-manager-4-core (= 1:4.6.0-1)", ""),
    # dcgm-exporter's package: the version is the exporter half of its release (nvidia_packages
    # dcgm-exporter-install; file names as in dcgm-exporter-repo-files)
    ("datacenter-gpu-manager-exporter", "4.1.3-1", "datacenter-gpu-manager-4-core", ""),
    ("datacenter-gpu-manager-exporter", "4.8.3-1", "datacenter-gpu-manager-4-core", ""),
    (
        "datacenter-gpu-manager-4-proprietary-cuda12",
        "1:4.2.3-1",
        "datacenter-gpu-manager-4-proprietary (= 1:4.2.3-1), datacenter-gpu-manager-4-cuda12 (= 1:4.2.3-1)",
        "",
    ),
]

ARTIFACTS = {
    "enroot_4.1.2-1_amd64.deb": b"fake enroot 4.1.2\n",
    "enroot+caps_4.1.2-1_amd64.deb": b"fake enroot+caps 4.1.2\n",
    "pyxis-0.24.0.tar.gz": b"fake pyxis 0.24.0\n",
}

SPEC = """\
cluster: {{name: offl, scheduler: slurm, os: ubuntu24.04}}
sources:
{sources}
versions:
  driver: {{version: 550.163.01, flavor: open, source: nvidia}}
  container_toolkit: 1.20.0
  enroot: 4.1.2
  pyxis: 0.24.0
  dcgm: 4.2.3
  dcgm_exporter: 4.2.3-4.1.3
node_groups:
  - name: ctl
    hosts: ctl01
    roles: [controller, accounting-db]
  - name: gpu
    hosts: gpu[01-02]
    roles: [compute]
    hardware:
      gpu: {{model: H100-80GB, count: 8}}
      sockets: 1
      cores_per_socket: 4
      threads_per_core: 1
      real_memory_mb: 8000
container_runtime: {{engine: containerd, cdi: true}}
slurm:
  partitions: [{{name: gpu, nodes: gpu, default: true}}]
"""


def artifact_pins(extra: dict[str, bytes] | None = None) -> str:
    """``sources.artifact_sha256`` for the test release files, and ``extra`` ones (no sha256
    known, none is fetched)."""
    files = {**ARTIFACTS, **(extra or {})}
    pins = ", ".join(f"{name}: {hashlib.sha256(data).hexdigest()}" for name, data in sorted(files.items()))
    return f"\n  artifact_sha256: {{{pins}}}"


def mirror_spec(base: str, key: str | None) -> str:
    """The test cluster in mirror mode, every NVIDIA source on ``base``, whose repositories are
    signed by the key with fingerprint ``key`` (the test upstream's, pinned as the site's own
    mirror key; None: no pin, the mirror is held to NVIDIA's keys)."""
    pins = f"\n  mirror_keys: {{nvidia_cuda: {key}, nvidia_container: {key}}}" if key else ""
    return SPEC.format(
        sources=(
            "  mode: mirror\n  mirrors:\n"
            f"    nvidia_cuda: {base}/cuda\n    nvidia_container: {base}/container\n    artifacts: {base}/artifacts"
            + pins
            + artifact_pins()
        )
    )


def offline_spec(bundle_dir: Path, fingerprint: str) -> str:
    """The test cluster in offline mode on ``bundle_dir``, whose key the operator pinned as ``fingerprint``."""
    sources = f"  mode: offline\n  bundle_dir: {bundle_dir}\n  bundle_fingerprint: {fingerprint}"
    return SPEC.format(sources=sources + artifact_pins())


def build_deb(workdir: Path, name: str, version: str, depends: str = "", provides: str = "") -> Path:
    """A tiny real .deb (one doc file) built with dpkg-deb."""
    root = workdir / f"{name}_{version.replace(':', '%3a')}"
    (root / "DEBIAN").mkdir(parents=True)
    control = [
        f"Package: {name}",
        f"Version: {version}",
        "Architecture: amd64",
        "Maintainer: gpuforge tests <tests@example.org>",
        "Section: utils",
        "Priority: optional",
    ]
    if depends:
        control.append(f"Depends: {depends}")
    if provides:
        control.append(f"Provides: {provides}")
    control.append(f"Description: {name} test package\n fake {name} {version} for gpuforge bundle tests")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    doc = root / "usr" / "share" / "doc" / name
    doc.mkdir(parents=True)
    (doc / "README").write_text(f"{name} {version}\n")
    out = workdir / f"{name}_{version.split(':', 1)[-1]}_amd64.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)], check=True, capture_output=True
    )
    shutil.rmtree(root)
    return out


class RepoKey:
    """An "upstream" repository signing key in its own 0700 GnuPG home (gpg, as NVIDIA's repositories)."""

    def __init__(self, home: Path, name: str) -> None:
        self.home = home
        home.mkdir(mode=0o700)
        self.gpg("--quick-gen-key", f"{name} <{name}@example.org>", "ed25519", "sign", "never")
        self.fingerprint = next(
            line.split(":")[9]
            for line in self.gpg("--with-colons", "--list-keys").decode().splitlines()
            if line.startswith("fpr:")
        )

    def gpg(self, *args: str, data: bytes | None = None) -> bytes:
        env = {**os.environ, "GNUPGHOME": str(self.home)}
        cmd = ["gpg", "--batch", "--quiet", "--passphrase", "", "--pinentry-mode", "loopback", *args]
        return subprocess.run(cmd, input=data, env=env, check=True, capture_output=True).stdout

    def armored(self) -> bytes:
        return self.gpg("--armor", "--export")

    def clearsign(self, text: str) -> bytes:
        return self.gpg("--clearsign", data=text.encode())

    def close(self) -> None:
        env = {**os.environ, "GNUPGHOME": str(self.home)}
        subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)


def sign_repo(repo: Path, key: RepoKey) -> None:
    """``InRelease`` over the repository's index files, as a flat upstream repository has it."""
    lines = ["Origin: test upstream", f"Label: {repo.name}", "Date: Sat, 01 Nov 2025 00:00:00 UTC", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        if (repo / name).is_file():
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    (repo / "InRelease").write_bytes(key.clearsign("\n".join(lines) + "\n"))


def flat_repo(repo: Path, debs: list[Deb], work: Path, gz: bool, key: RepoKey, key_file: str) -> None:
    """An upstream-style flat repository: ``pool/*.deb``, a ``Packages`` (+ ``.gz``) index, its
    signed ``InRelease`` and the key (armored, as NVIDIA publishes it) in ``key_file``."""
    pool = repo / "pool"
    pool.mkdir(parents=True)
    for name, version, depends, provides in debs:
        deb = build_deb(work, name, version, depends, provides)
        shutil.move(deb, pool / deb.name)
    (repo / key_file).write_bytes(key.armored())
    index_repo(repo, gz, key)


def index_repo(repo: Path, gz: bool, key: RepoKey) -> None:
    """(Re)write the ``Packages`` index of ``repo/pool/*.deb`` (only ``Packages.gz`` when ``gz``), signed."""
    stanzas = []
    for deb in sorted((repo / "pool").glob("*.deb")):
        data = deb.read_bytes()
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True).stdout
        stanzas.append(
            control.rstrip("\n")
            + f"\nFilename: ./pool/{deb.name}\nSize: {len(data)}\nMD5sum: {hashlib.md5(data).hexdigest()}"
            + f"\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    text = "\n".join(stanzas)
    for old in ("Packages", "Packages.gz"):
        (repo / old).unlink(missing_ok=True)
    if gz:
        (repo / "Packages.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (repo / "Packages").write_text(text)
    sign_repo(repo, key)


@dataclass
class Server:
    """A loopback HTTP server over ``root``; ``requests`` lists the paths asked for."""

    root: Path
    requests: list[str] = field(default_factory=list)
    key: str | None = None  # fingerprint of the key its repositories are signed with, where a test sets it
    httpd: http.server.ThreadingHTTPServer | None = None
    port: int = 0

    def start(self, port: int = 0) -> None:
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a: Any, **kw: Any) -> None:
                super().__init__(*a, directory=str(outer.root), **kw)

            def do_GET(self) -> None:
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def repo_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RepoKey]:
    """The key the test upstream signs its repositories with."""
    key = RepoKey(tmp_path_factory.mktemp("gnupg") / "home", "test-upstream")
    try:
        yield key
    finally:
        key.close()


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory, repo_key: RepoKey) -> Path:
    """Served tree: ``container/`` (plain Packages, key ``gpgkey``), ``cuda/`` (Packages.gz, key
    ``3bf863cc.pub``), both signed by ``repo_key``; ``artifacts/``."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed")
    root = tmp_path_factory.mktemp("upstream")
    work = tmp_path_factory.mktemp("debs")
    flat_repo(root / "container", CONTAINER_DEBS, work, gz=False, key=repo_key, key_file="gpgkey")
    flat_repo(root / "cuda", CUDA_DEBS, work, gz=True, key=repo_key, key_file="3bf863cc.pub")
    (root / "artifacts").mkdir()
    for name, data in ARTIFACTS.items():
        (root / "artifacts" / name).write_bytes(data)
    return root


def serve_copy(tree: Path, tmp_path: Path) -> Iterator[Server]:
    """A private copy of ``tree``, served on 127.0.0.1 until the generator is closed."""
    root = tmp_path / "served"
    shutil.copytree(tree, root)
    server = Server(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def served(upstream: Path, tmp_path: Path) -> Iterator[Server]:
    """A private copy of the upstream tree, served on 127.0.0.1 (shut down after the test)."""
    yield from serve_copy(upstream, tmp_path)


def cli_env() -> dict[str, str]:
    """The environment for CLI runs: no proxy, so loopback requests stay on loopback."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["no_proxy"] = "127.0.0.1,localhost"
    return env


def run_bundle(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpuforge bundle ARGS`` as a subprocess (``env``: instead of ``cli_env()``)."""
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", "bundle", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env if env is not None else cli_env(),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )

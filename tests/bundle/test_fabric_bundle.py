"""``gpuforge bundle`` for a spec with a GPU fabric: DOCA-OFED's repository (checked against the key the
spec pins), NCCL at the pinned build from the CUDA repository, GDRCopy and the nccl-tests and SHARP plugin
archives as release files; then the offline spec's fabric installs from that bundle only.

Every request goes to 127.0.0.1 (the conftest's loopback server).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bundle.downloads import spec_needs
from gpuforge.bundle.verify import verify_bundle
from gpuforge.render import fabric as fr
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import fabric_packages as table
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.fabric_rules import fabric_of
from tests.bundle.conftest import (
    ARTIFACTS,
    CONTAINER_DEBS,
    CUDA_DEBS,
    Deb,
    RepoKey,
    Server,
    artifact_pins,
    flat_repo,
    serve_copy,
)

DOCA = "3.2.1-052000-25.10"  # DOCA 3.2.1's own version scheme (doca-ofed-meta: openmpi "= <doca-version>")
DOCA_DEBS: list[Deb] = [
    ("doca-ofed", DOCA, f"openmpi (= {DOCA}), mlnx-ofed-kernel-dkms, libibverbs1", ""),
    ("openmpi", DOCA, "libibverbs1", ""),
    ("mlnx-ofed-kernel-dkms", "25.10.OFED.25.10.1.2.1-1", "dkms", ""),
    ("libibverbs1", "2510mlnx58-1.2510061", "ibverbs-providers", ""),
    ("ibverbs-providers", "2510mlnx58-1.2510061", "", ""),
    ("libibverbs-dev", "2510mlnx58-1.2510061", "libibverbs1 (= 2510mlnx58-1.2510061)", ""),
    ("doca-sdk-flow", DOCA, "", ""),  # in the repository, wanted by nothing here
]
NCCL_DEBS: list[Deb] = [
    ("libnccl2", "2.27.7-1+cuda12.4", "", ""),
    ("libnccl2", "2.27.7-1+cuda12.9", "", ""),  # the same release for another CUDA: not the pinned build
    ("libnccl2", "2.28.3-1+cuda12.4", "", ""),  # newer: apt would take it but for the pin
    ("libnccl-dev", "2.27.7-1+cuda12.4", "libnccl2 (= 2.27.7-1+cuda12.4)", ""),
    ("libnccl-dev", "2.28.3-1+cuda12.4", "libnccl2 (= 2.28.3-1+cuda12.4)", ""),
    ("cuda-toolkit-12-4", "12.4.1-1", "", ""),
]
GDRCOPY = [f"{p}_2.6-1_amd64.Ubuntu24_04.deb" for p in table.GDRCOPY_PACKAGES]
RELEASE_FILES = {
    **{name: f"fake {name}\n".encode() for name in GDRCOPY},
    "nccl-tests-2.19.6.tar.gz": b"fake nccl-tests 2.19.6\n",
    "nccl-rdma-sharp-plugins-2.1.0.tar.gz": b"fake SHARP plugin 2.1.0\n",
}
SPEC = """\
cluster: {{name: fb, scheduler: slurm, os: ubuntu24.04}}
sources:
{sources}
versions:
  driver: {{version: 550.163.01, flavor: open, source: nvidia}}
  cuda_toolkit: "12.4"
  container_toolkit: 1.20.0
dcgm: {{enabled: false, exporter: false}}
container_runtime: {{engine: containerd, cdi: true}}
node_groups:
  - {{name: ctl, hosts: ctl1, address_start: 192.0.2.10, roles: [controller]}}
  - name: gpu
    hosts: gpu[1-2]
    address_start: 192.0.2.20
    roles: [compute]
    hardware:
      gpu: {{model: H100-80GB, count: 8}}
      sockets: 1
      cores_per_socket: 4
      threads_per_core: 1
      real_memory_mb: 8000
    fabric:
      type: infiniband
      stack: doca
      doca_version: 3.2.1
{doca_key}      nccl: 2.27.7-1
      nccl_cuda: "12.4"
      gdrcopy: true
      nccl_tests: true
      sharp_plugin: 2.1.0
slurm:
  accounting: {{enabled: false}}
  partitions: [{{name: gpu, nodes: gpu, default: true}}]
"""


@pytest.fixture
def fabric_served(repo_key: RepoKey, tmp_path: Path) -> Iterator[Server]:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed: the test repositories are made of real .debs")
    root, work = tmp_path / "tree", tmp_path / "debs"
    work.mkdir()
    flat_repo(root / "container", CONTAINER_DEBS, work, gz=False, key=repo_key, key_file="gpgkey")
    flat_repo(root / "cuda", CUDA_DEBS + NCCL_DEBS, work, gz=True, key=repo_key, key_file="3bf863cc.pub")
    doca_dir = root / "doca" / "3.2.1" / "ubuntu24.04" / "x86_64"
    flat_repo(doca_dir, DOCA_DEBS, work, gz=False, key=repo_key, key_file=table.DOCA_KEY_FILE)
    (root / "artifacts").mkdir()
    for name, data in {**ARTIFACTS, **RELEASE_FILES}.items():  # enroot and pyxis: the Slurm nodes'
        (root / "artifacts" / name).write_bytes(data)
    yield from serve_copy(root, tmp_path)


def write(tmp_path: Path, name: str, sources: str, doca_key: str | None) -> Path:
    path = tmp_path / name
    key = f"      doca_key_fingerprint: {doca_key}\n" if doca_key else ""
    path.write_text(SPEC.format(sources=sources + artifact_pins(RELEASE_FILES), doca_key=key))
    return path


def mirror_sources(base: str, key: str) -> str:
    return (
        f"  mode: mirror\n  mirrors:\n    nvidia_cuda: {base}/cuda\n    nvidia_container: {base}/container\n"
        f"    artifacts: {base}/artifacts\n    doca: '{base}/doca/3.2.1/{{distro}}/{{arch}}'\n"
        f"  mirror_keys: {{nvidia_cuda: {key}, nvidia_container: {key}}}"
    )


def test_the_fabric_installs_offline_from_the_bundle(fabric_served: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    from tests.bundle.conftest import run_bundle

    key = repo_key.fingerprint
    out = tmp_path / "bundle"
    cp = run_bundle(str(write(tmp_path, "mirror.yaml", mirror_sources(fabric_served.url, key), key)), "-o", str(out))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["complete"] is True, manifest["missing"]

    # DOCA-OFED with its closure, and DOCA's libibverbs-dev for the plugin's build; nothing else of DOCA's.
    assert sorted(p.name for p in (out / "apt" / "doca").glob("*.deb")) == [
        f"doca-ofed_{DOCA}_amd64.deb",
        "ibverbs-providers_2510mlnx58-1.2510061_amd64.deb",
        "libibverbs-dev_2510mlnx58-1.2510061_amd64.deb",
        "libibverbs1_2510mlnx58-1.2510061_amd64.deb",
        "mlnx-ofed-kernel-dkms_25.10.OFED.25.10.1.2.1-1_amd64.deb",
        f"openmpi_{DOCA}_amd64.deb",
    ]
    doca = next(r for r in manifest["repositories"] if r["path"] == "apt/doca")
    assert doca["external"] == [{"dependency": "dkms", "required_by": ["mlnx-ofed-kernel-dkms"]}]
    assert doca["sources"][0]["signed_by"] == key  # the key fabric.doca_key_fingerprint pins
    # NCCL: the pinned build for the pinned CUDA, not the newer release nor the other CUDA's build.
    nccl = sorted(p.name for p in (out / "apt" / "nvidia-cuda").glob("libnccl*.deb"))
    assert nccl == ["libnccl-dev_2.27.7-1+cuda12.4_amd64.deb", "libnccl2_2.27.7-1+cuda12.4_amd64.deb"]
    for name, data in RELEASE_FILES.items():
        assert (out / "artifacts" / name).read_bytes() == data
    pin = manifest["signing"]["fingerprint"]
    assert verify_bundle(out, pin) == []

    # Offline (no DOCA key needed there: the bundle's key signs apt/doca), the fabric's sources are the bundle's.
    sources = f"  mode: offline\n  bundle_dir: {out}\n  bundle_fingerprint: {pin}"
    spec = load_spec(write(tmp_path, "offline.yaml", sources, None))
    gpu1 = next(n for n in resolve_nodes(spec) if n.name == "gpu1")
    f = fabric_of(spec, gpu1)
    assert f is not None
    repo = fr.doca_repo(spec, gpu1.platform, f)
    assert repo.bundle == str(out / "apt" / "doca")
    assert f"deb [signed-by={src.BUNDLE_KEYRING}] file:{repo.url} ./" in fr.doca_source(repo, deb=True)
    assert src.cuda_repo(spec, gpu1.platform).bundle == str(out / "apt" / "nvidia-cuda")
    arts = [*fr.gdrcopy_artifacts(spec, gpu1, f), *(src.artifact(spec, n, None) for n in list(RELEASE_FILES)[3:])]
    assert sorted(a.name for a in arts) == sorted(RELEASE_FILES)
    assert all(a.available and a.local is not None for a in arts), [a.reason for a in arts]


def test_a_doca_key_other_than_the_pinned_one_is_refused(
    fabric_served: Server, repo_key: RepoKey, tmp_path: Path
) -> None:
    from tests.bundle.conftest import run_bundle

    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    spec = write(tmp_path, "mirror.yaml", mirror_sources(fabric_served.url, repo_key.fingerprint), other)
    out = tmp_path / "bundle"
    cp = run_bundle(str(spec), "-o", str(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert cp.returncode != 0 and manifest["complete"] is False
    missing = [m for m in manifest["missing"] if m["what"].startswith("apt/doca")]
    assert missing and other in json.dumps(missing), manifest["missing"]
    assert not list((out / "apt" / "doca").glob("*.deb"))  # nothing of a repository whose key is not the pinned one


def test_an_offline_spec_without_the_doca_key_names_the_field(tmp_path: Path) -> None:
    """Offline mode does not need the key on the nodes; the bundle built from it does, and says so."""
    spec = load_spec(
        write(
            tmp_path,
            "offline.yaml",
            "  mode: offline\n  bundle_dir: /nonexistent\n  bundle_fingerprint: " + "A" * 40,
            None,
        )
    )
    (doca,) = [n for n in spec_needs(spec).repos.values() if n.kind == fr.DOCA_REPO]
    assert doca.url is None
    assert doca.reason is not None and "fabric.doca_key_fingerprint is not set" in doca.reason
    assert sorted(doca.nodes) == ["gpu1", "gpu2"]
    assert sorted(doca.wants) == ["doca-ofed", "libibverbs-dev"]

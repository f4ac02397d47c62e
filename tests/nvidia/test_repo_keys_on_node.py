"""Mirror mode: the NVIDIA repository keys a node fetches from a site mirror are moved into place
only once they are the pinned keys. The deploy's own key steps run for real (``sh -c``) against a
mirror served on 127.0.0.1, their node paths pointed into a temp dir.

Pinned (``sources.mirror_keys``, a mirror re-signed with the site's key): installed. Not pinned:
the mirror is held to NVIDIA's own keys, and a mirror serving any other key installs nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, Step, StepKind, plan_layer
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec import parse_spec, resolve_nodes
from tests import yaml_text
from tests.bundle.conftest import RepoKey, Server, cli_env
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    shutil.which("dpkg-deb") is None or shutil.which("curl") is None, reason="needs dpkg-deb and curl"
)


@pytest.fixture(scope="module")
def repo_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RepoKey]:
    """The site's own mirror signing key."""
    key = RepoKey(tmp_path_factory.mktemp("gnupg") / "home", "site-mirror")
    try:
        yield key
    finally:
        key.close()


@pytest.fixture
def mirror(repo_key: RepoKey, tmp_path: Path) -> Iterator[Server]:
    """A site mirror re-signed with the test key: cuda-keyring (the key as a binary keyring at
    cuda-archive-keyring.gpg's path) beside the CUDA repository, ``gpgkey`` beside the toolkit's."""
    root = tmp_path / "served"
    (root / "cuda").mkdir(parents=True)
    (root / "container").mkdir()
    package = tmp_path / "cuda-keyring"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(
        "Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\nMaintainer: test <t@example.org>\n"
        "Description: the site's key\n"
    )
    keyring = package / src.CUDA_KEYRING.lstrip("/")
    keyring.parent.mkdir(parents=True)
    keyring.write_bytes(repo_key.gpg("--export"))
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(package), str(root / "cuda" / src.CUDA_KEYRING_DEB)],
        check=True,
        capture_output=True,
    )
    (root / "container" / "gpgkey").write_bytes(repo_key.armored())
    server = Server(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def key_steps(base: str, mirror_key: str | None) -> list[Step]:
    """The keyring steps of gpu001's nvidia-repos layer (nothing installed yet), mirror on ``base``."""
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"]["mirrors"].update(nvidia_cuda=f"{base}/cuda", nvidia_container=f"{base}/container")
    if mirror_key is not None:
        data["sources"]["mirror_keys"] = {"nvidia_cuda": mirror_key, "nvidia_container": mirror_key}
    spec = parse_spec(yaml_text.dump(data))
    node = next(n for n in resolve_nodes(spec) if n.name == "gpu001")
    ctx = nvidia_needs.Ctx.build(spec, node, HostFacts(gpus=["2330"] * 8, package_tool="dpkg"), name="test-gpu001")
    layer = dict((layer.name, layer) for _, layer in nv.nvidia_layers(ctx))["nvidia-repos"]
    return [s for s in plan_layer(layer, LayerFacts())[0] if s.kind is StepKind.KEYRING]


def run_on_node(step: Step, root: Path) -> subprocess.CompletedProcess[str]:
    """``step``'s command with the node's key and download places under ``root``."""
    command = step.command or ""
    for place in ("/usr/share/keyrings/", src.DOWNLOAD_DIR):
        command = command.replace(f" {place}", f" {root}{place}")
    (root / "usr/share/keyrings").mkdir(parents=True, exist_ok=True)
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=cli_env(), timeout=60)


def test_the_pinned_site_keys_are_installed(mirror: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    cuda, container = key_steps(mirror.url, repo_key.fingerprint)
    assert repo_key.fingerprint in cuda.summary and repo_key.fingerprint in container.summary
    for step, place in ((cuda, src.CUDA_KEYRING), (container, src.CONTAINER_KEYRING)):
        done = run_on_node(step, tmp_path)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / place.lstrip("/")).is_file() and not (tmp_path / f"{place.lstrip('/')}.part").exists()


def test_an_unpinned_mirror_is_held_to_nvidias_keys(mirror: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """No sources.mirror_keys: the site's key is refused, nothing is moved into place."""
    cuda, container = key_steps(mirror.url, None)
    for step, place, kind in (
        (cuda, src.CUDA_KEYRING, "nvidia-cuda"),
        (container, src.CONTAINER_KEYRING, "nvidia-container"),
    ):
        refused = run_on_node(step, tmp_path)
        assert refused.returncode != 0
        nvidia = table.APT_REPO_FINGERPRINTS[kind]
        assert f"key {repo_key.fingerprint}, not the pinned {nvidia}: refused" in refused.stderr
        assert not (tmp_path / place.lstrip("/")).exists()


def test_a_mirror_serving_another_key_installs_nothing(mirror: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    other = RepoKey(tmp_path / "other-gnupg", "mirror-attacker")
    try:
        (mirror.root / "container" / "gpgkey").write_bytes(other.armored())
    finally:
        other.close()
    _, container = key_steps(mirror.url, repo_key.fingerprint)
    refused = run_on_node(container, tmp_path)
    assert refused.returncode != 0
    assert f"key {other.fingerprint}, not the pinned {repo_key.fingerprint}: refused" in refused.stderr
    assert not (tmp_path / src.CONTAINER_KEYRING.lstrip("/")).exists()


def rhel_key_step(base: str, mirror_key: str | None) -> Step:
    """The container toolkit key step of a RHEL 9 GPU node's nvidia-repos layer, mirror on ``base``."""
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["cluster"]["os"] = "rhel9"
    data["sources"]["mirrors"].update(nvidia_cuda=f"{base}/cuda", nvidia_container=f"{base}/container")
    if mirror_key is not None:
        data["sources"]["mirror_keys"] = {"nvidia_container": mirror_key}
    spec = parse_spec(yaml_text.dump(data))
    node = next(n for n in resolve_nodes(spec) if n.name == "gpu001")
    ctx = nvidia_needs.Ctx.build(spec, node, HostFacts(gpus=["2330"] * 8, package_tool="rpm"), name="test-gpu001")
    layer = dict((layer.name, layer) for _, layer in nv.nvidia_layers(ctx))["nvidia-repos"]
    steps = [s for s in plan_layer(layer, LayerFacts())[0] if s.kind is StepKind.KEYRING]
    return next(s for s in steps if "nvidia-container" in s.summary)


def test_rhel_nodes_take_repository_keys_only_when_pinned(mirror: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """RHEL: dnf reads the key from /etc/pki/rpm-gpg (``gpgkey=file://``), where it lands only once
    it is the pinned one; a mirror's key that is not is refused, and nothing is put there."""
    place = src.rpm_key_path(src.CONTAINER_REPO)

    def run(step: Step) -> subprocess.CompletedProcess[str]:
        command = (step.command or "").replace(" /etc/pki/rpm-gpg", f" {tmp_path}/etc/pki/rpm-gpg")
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=cli_env(), timeout=60)

    refused = run(rhel_key_step(mirror.url, None))  # held to NVIDIA's own key
    nvidia = table.RPM_REPO_FINGERPRINTS[src.CONTAINER_REPO]
    assert refused.returncode != 0 and f"not the pinned {nvidia}: refused" in refused.stderr
    assert not (tmp_path / place.lstrip("/")).exists()
    done = run(rhel_key_step(mirror.url, repo_key.fingerprint))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / place.lstrip("/")).read_bytes() == repo_key.armored()


def test_a_mirror_serving_the_pinned_key_and_another_installs_nothing(
    mirror: Server, repo_key: RepoKey, tmp_path: Path
) -> None:
    """The review's item 1 at the caller: ``gpgkey`` is the pinned key's armored block followed by a
    second block with another key (gpg, so apt and dnf, would trust both). Debian and RHEL steps
    both refuse it and put nothing where it is trusted."""
    other = RepoKey(tmp_path / "other-gnupg", "mirror-attacker")
    try:
        (mirror.root / "container" / "gpgkey").write_bytes(repo_key.armored() + other.armored())
    finally:
        other.close()
    _, container = key_steps(mirror.url, repo_key.fingerprint)
    refused = run_on_node(container, tmp_path)
    assert refused.returncode != 0
    assert f"key {repo_key.fingerprint}, {other.fingerprint}, not the pinned" in refused.stderr
    assert not (tmp_path / src.CONTAINER_KEYRING.lstrip("/")).exists()
    rhel = rhel_key_step(mirror.url, repo_key.fingerprint).command or ""
    rhel = rhel.replace(" /etc/pki/rpm-gpg", f" {tmp_path}/etc/pki/rpm-gpg")
    refused = subprocess.run(["sh", "-c", rhel], capture_output=True, text=True, env=cli_env(), timeout=60)
    assert refused.returncode != 0 and f"{other.fingerprint}, not the pinned" in refused.stderr
    assert not (tmp_path / src.rpm_key_path(src.CONTAINER_REPO).lstrip("/")).exists()

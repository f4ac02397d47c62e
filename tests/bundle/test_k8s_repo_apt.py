"""The Kubernetes package source and pin, with the real apt: a repository in pkgs.k8s.io's layout
(``core:/stable:/v1.31/deb/``, armored ``Release.key`` beside a signed flat index) served on
127.0.0.1 as a site mirror; the key fetched by the deploy's own command, the rendered source line
and pin in a private apt configuration, then ``apt-get update`` and what apt would install.

Nothing can serve the real kubelet here; the packages are tiny real .debs with pkgs.k8s.io's
version spelling (``1.31.4-1.1``).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy.converge import LayerFacts, StepKind
from gpuforge.deploy.layers.kubernetes import kubernetes_layer
from gpuforge.render import k8s_packages as pkgs
from gpuforge.spec import Spec, k8s_upstream, resolve_nodes
from gpuforge.spec.load import parse_spec
from gpuforge.spec.nodes import Node
from tests import yaml_text
from tests.bundle.conftest import RepoKey, Server, cli_env, flat_repo
from tests.conftest import REPO

VERSIONS = ("1.31.3-1.1", "1.31.4-1.1", "1.31.5-1.1")
REPO_DIR = "core:/stable:/v1.31/deb"

pytestmark = pytest.mark.skipif(
    shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None or shutil.which("curl") is None,
    reason="needs apt-get, dpkg-deb and curl (Debian tools)",
)


@pytest.fixture
def k8s_mirror(repo_key: RepoKey, tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "served"
    debs = [(name, v, "", "") for name in ("kubelet", "kubeadm", "kubectl") for v in VERSIONS]
    flat_repo(root / REPO_DIR, debs, tmp_path / "debs", gz=False, key=repo_key, key_file="Release.key")
    server = Server(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def node_files(base_url: str, key: str | None) -> tuple[Spec, Node, dict[str, str]]:
    """The spec on the mirror at ``base_url``, its key pinned as ``key`` (None: pkgs.k8s.io's)."""
    data = yaml.safe_load((REPO / "inventories" / "k8s-gpu-operator.yaml").read_text())
    data["cluster"]["os"] = "debian12"
    data["versions"]["kubernetes"] = "1.31.4"  # the mirror's minor (the layout is the same for every minor)
    data["sources"] = {"mode": "mirror", "mirrors": {"kubernetes": f"{base_url}/"}}
    if key is not None:
        data["sources"]["mirror_keys"] = {"kubernetes": key}
    spec = parse_spec(yaml_text.dump(data), "k8s.yaml", base_dir=REPO / "inventories")
    node = next(n for n in resolve_nodes(spec) if n.name == "kgpu01")
    return spec, node, {f.path: f.data.decode() for f in pkgs.k8s_repo_files(spec, node)}


def private_apt(root: Path, keyring: Path) -> dict[str, str]:
    for d in ("etc/preferences.d", "etc/sources.list.d", "state/lists/partial", "cache/archives/partial"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/sources.list").write_text("")
    (root / "state/status").write_text("")
    conf = root / "apt.conf"
    conf.write_text(
        f'Dir::Etc::SourceList "{root}/etc/sources.list";\nDir::Etc::SourceParts "{root}/etc/sources.list.d";\n'
        f'Dir::Etc::Preferences "{root}/etc/preferences";\nDir::Etc::PreferencesParts "{root}/etc/preferences.d";\n'
        f'Dir::State "{root}/state";\nDir::State::status "{root}/state/status";\nDir::Cache "{root}/cache";\n'
        'APT::Architecture "amd64";\nAPT::Architectures { "amd64"; };\nAPT::Sandbox::User "root";\n'
        'Debug::NoLocking "true";\nAcquire::Languages "none";\n'
    )
    return {**cli_env(), "APT_CONFIG": str(conf)}


def apt(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["apt-get", "-q", *args], capture_output=True, text=True, env=env, timeout=120)


def candidate(env: dict[str, str], package: str) -> str:
    out = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, env=env, check=True)
    return next(line.split(":", 1)[1].strip() for line in out.stdout.splitlines() if "Candidate:" in line)


def run_key_step(spec: Spec, node: Node, keyring: Path) -> subprocess.CompletedProcess[str]:
    """The deploy's own key step, run for real, pointed at ``keyring``'s directory instead of /etc/apt/keyrings."""
    layer = kubernetes_layer(spec, node)
    assert layer.after is not None
    (key_step,) = [s for s in layer.after(LayerFacts(), set()) if s.kind is StepKind.KEYRING]
    command = (key_step.command or "").replace("/etc/apt/keyrings", str(keyring.parent))
    return subprocess.run(["sh", "-c", command], env=cli_env(), timeout=60, capture_output=True, text=True)


def test_the_real_apt_takes_the_pinned_patch_from_the_mirror(
    k8s_mirror: Server, repo_key: RepoKey, tmp_path: Path
) -> None:
    spec, node, files = node_files(k8s_mirror.url, repo_key.fingerprint)  # the site's mirror key, pinned
    root = tmp_path / "apt"
    keyring = root / "keyrings" / "gpuforge-kubernetes.asc"
    env = private_apt(root, keyring)

    key_step = run_key_step(spec, node, keyring)
    assert key_step.returncode == 0, key_step.stderr
    assert keyring.read_bytes() == (k8s_mirror.root / REPO_DIR / "Release.key").read_bytes()
    assert keyring.stat().st_mode & 0o777 == 0o644

    source = files[pkgs.K8S_LIST]
    assert source == f"deb [signed-by={pkgs.K8S_KEYRING}] {k8s_mirror.url}/{REPO_DIR}/ /\n"
    (root / "etc/sources.list.d/kubernetes.list").write_text(source.replace(pkgs.K8S_KEYRING, str(keyring)))
    (root / "etc/preferences.d/kubernetes").write_text(files[pkgs.K8S_PIN])

    update = apt(env, "update")
    assert update.returncode == 0 and "W:" not in update.stdout + update.stderr, update.stdout + update.stderr
    assert f"/{REPO_DIR}/InRelease" in k8s_mirror.requests  # a signed index, checked with the fetched key

    wanted = pkgs.package_specs(spec, node)
    assert wanted == ["kubelet=1.31.4-*", "kubeadm=1.31.4-*", "kubectl=1.31.4-*"]
    sim = apt(env, "install", "-s", "--allow-downgrades", *wanted)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    installs = sorted(line.split()[1:3] for line in sim.stdout.splitlines() if line.startswith("Inst "))
    assert installs == [["kubeadm", "(1.31.4-1.1"], ["kubectl", "(1.31.4-1.1"], ["kubelet", "(1.31.4-1.1"]]

    # The pin is what holds the patch: 1.31.5 is newer, and apt takes it once the pin is gone.
    assert candidate(env, "kubelet") == "1.31.4-1.1"
    (root / "etc/preferences.d/kubernetes").unlink()
    assert candidate(env, "kubelet") == "1.31.5-1.1"


def test_a_mirror_key_that_is_not_the_pinned_one_is_never_installed(
    k8s_mirror: Server, repo_key: RepoKey, tmp_path: Path
) -> None:
    """Mirror mode: the key beside the mirror is checked against the pinned fingerprint by the
    step's own command, run for real, before it is moved into place; another key stays out."""
    keyring = tmp_path / "apt" / "keyrings" / "gpuforge-kubernetes.asc"
    # No pin of the site's own: the mirror is held to pkgs.k8s.io's key, and the test key is refused.
    spec, node, _ = node_files(k8s_mirror.url, None)
    refused = run_key_step(spec, node, keyring)
    assert refused.returncode != 0
    assert f"key {repo_key.fingerprint}, not the pinned {k8s_upstream.KEY_FINGERPRINT}: refused" in refused.stderr
    assert not keyring.exists()
    # The site's key pinned, and the mirror serving another key in its place: refused too.
    other = RepoKey(tmp_path / "other-gnupg", "mirror-attacker")
    try:
        (k8s_mirror.root / REPO_DIR / "Release.key").write_bytes(other.armored())
    finally:
        other.close()
    spec, node, _ = node_files(k8s_mirror.url, repo_key.fingerprint)
    refused = run_key_step(spec, node, keyring)
    assert refused.returncode != 0
    assert f"key {other.fingerprint}, not the pinned {repo_key.fingerprint}: refused" in refused.stderr
    assert not keyring.exists()


def test_a_signature_from_another_key_is_refused(k8s_mirror: Server, repo_key: RepoKey, tmp_path: Path) -> None:
    """The source line's signed-by is the only key apt trusts for this repository."""
    _, _, files = node_files(k8s_mirror.url, repo_key.fingerprint)
    root = tmp_path / "apt"
    other = RepoKey(tmp_path / "other-gnupg", "someone-else")
    try:
        keyring = root / "keyrings" / "gpuforge-kubernetes.asc"
        keyring.parent.mkdir(parents=True)
        keyring.write_bytes(other.armored())
        env = private_apt(root, keyring)
        source = files[pkgs.K8S_LIST].replace(pkgs.K8S_KEYRING, str(keyring))
        (root / "etc/sources.list.d/kubernetes.list").write_text(source)
        update = apt(env, "update")
        assert update.returncode != 0 and "NO_PUBKEY" in update.stdout + update.stderr, update.stdout + update.stderr
        assert apt(env, "install", "-s", "kubelet=1.31.4-*").returncode != 0
    finally:
        other.close()

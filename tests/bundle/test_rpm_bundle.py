"""``gpuforge bundle`` for RHEL 9 nodes end to end: real rpm-md repositories on 127.0.0.1 in, a
signed rpm-md bundle out, read by the real ``dnf`` (module streams, ``repo_gpgcheck``)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bundle.downloads import spec_needs
from gpuforge.bundle.layout import MANIFEST, MANIFEST_SIG
from gpuforge.bundle.rpmmd import REPOMD, REPOMD_SIG
from gpuforge.bundle.signing import BUNDLE_KEY, BUNDLE_RPM_KEY, BundleSigner
from gpuforge.bundle.trust import sign_repositories
from gpuforge.bundle.verify import verify_bundle
from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, plan_layer
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec import parse_spec, resolve_nodes
from tests.bundle.conftest import ARTIFACTS, SPEC, RepoKey, Server, artifact_pins, cli_env, run_bundle, serve_copy
from tests.bundle.rpmrepo import (
    CONTAINER_RPMS,
    CUDA_RPMS,
    DOCKER_RPMS,
    EPEL_RPMS,
    Rpm,
    build_rpm,
    require_rpm_tools,
    rpm_repo,
)

CUDA = "rpm/nvidia-cuda"
CONTAINER = "rpm/nvidia-container"
DOCKER = "rpm/docker-ce"
EPEL = "rpm/epel"
RHEL_ARTIFACTS = ("enroot-4.1.2-1.el8.x86_64.rpm", "enroot+caps-4.1.2-1.el8.x86_64.rpm")
RHEL_ARTIFACT = b"fake enroot rpm\n"


def rhel_spec(base: str, key: str | None, sources: str = "mirror") -> str:
    """The bundle tests' cluster (conftest.SPEC) on RHEL 9: every source on ``base`` (mirror
    mode), each repository signed by the key ``key`` pins, or ``sources`` given whole."""
    mirrors = (
        "  mode: mirror\n  mirrors:\n"
        f"    nvidia_cuda: {base}/cuda\n    nvidia_container: {base}/container\n"
        f"    docker_ce: {base}/docker\n    epel: {base}/epel\n    artifacts: {base}/artifacts"
    )
    if key is not None:
        mirrors += f"\n  mirror_keys: {{nvidia_cuda: {key}, nvidia_container: {key}, docker_ce: {key}, epel: {key}}}"
    pins = artifact_pins({name: RHEL_ARTIFACT for name in RHEL_ARTIFACTS})
    text = SPEC.format(sources=(mirrors if sources == "mirror" else sources) + pins)
    return text.replace("os: ubuntu24.04", "os: rhel9")


#: What the RHEL nodes install, at the pins, with the closure within each repository.
PINNED = {
    CUDA: {
        "nvidia-open": "3:550.163.01-1.el9",  # the stream's newest is 550.163.01; 575 is another stream
        "nvidia-driver": "3:550.163.01-1.el9",  # requires (=)
        "nvidia-driver-libs": "3:550.163.01-1.el9",  # through its provide nvidia-driver-libs(x86-64)
        "kmod-nvidia-open-dkms": "3:550.163.01-1.el9",
        "nvidia-modprobe": "3:550.163.01-1.el9",  # through a file requirement (/usr/sbin/nvidia-modprobe)
        "datacenter-gpu-manager-4-core": "1:4.2.3-1",  # epoch, not the newer 1:4.3.0-1
        "datacenter-gpu-manager-exporter": "4.1.3-1",  # dcgm-exporter 4.2.3-4.1.3: its exporter half
        "datacenter-gpu-manager-4-cuda12": "1:4.2.3-1",
        "datacenter-gpu-manager-4-proprietary": "1:4.2.3-1",
        "datacenter-gpu-manager-4-proprietary-cuda12": "1:4.2.3-1",
    },
    CONTAINER: {
        "nvidia-container-toolkit": "1.20.0-1",
        "nvidia-container-toolkit-base": "1.20.0-1",
        "libnvidia-container-tools": "1.20.0-1",
        "libnvidia-container1": "1.20.0-1",  # wanted at the pin, which also meets the tools' ">="
    },
    DOCKER: {"containerd.io": "1.7.27-3.1.el9"},
    EPEL: {
        "dkms": "3.1.5-1.el9",
        "parallel": "20241022-1.el9",
        "slurm-devel": "22.05.9-1.el9",
        "slurm": "22.05.9-1.el9",
    },
}
EXTERNAL = {
    CUDA: {
        "dkms": ["kmod-nvidia-open-dkms"],
        "kernel-devel": ["kmod-nvidia-open-dkms"],
        "libc.so.6()(64bit)": ["nvidia-driver"],
    },
    CONTAINER: {"libc.so.6()(64bit)": ["libnvidia-container-tools"]},
    DOCKER: {"container-selinux": ["containerd.io"]},
    EPEL: {"gcc": ["dkms"], "kmod": ["dkms"], "perl-interpreter": ["parallel"], "munge-libs": ["slurm"]},
}


@pytest.fixture(scope="session")
def rpm_upstream(tmp_path_factory: pytest.TempPathFactory, repo_key: RepoKey) -> Path:
    """``cuda/`` (signed packages, modules.yaml, key D42D0685.pub), ``container/`` (signed
    repomd.xml, key gpgkey), ``docker/`` (signed packages, key gpg), ``epel/`` (signed packages,
    key RPM-GPG-KEY-EPEL-9), ``artifacts/``."""
    require_rpm_tools()
    root = tmp_path_factory.mktemp("rpm-upstream")
    work = tmp_path_factory.mktemp("rpms")
    rpm_repo(root / "cuda", CUDA_RPMS, work, repo_key, src.CUDA_RPM_KEY, sign="packages")
    rpm_repo(root / "container", CONTAINER_RPMS, work, repo_key, "gpgkey", sign="metadata")
    rpm_repo(root / "docker", DOCKER_RPMS, work, repo_key, "gpg", sign="packages")
    rpm_repo(root / "epel", EPEL_RPMS, work, repo_key, src.EPEL_KEY, sign="packages")
    (root / "artifacts").mkdir()
    for name, data in ARTIFACTS.items():
        (root / "artifacts" / name).write_bytes(data)
    for name in RHEL_ARTIFACTS:
        (root / "artifacts" / name).write_bytes(RHEL_ARTIFACT)
    return root


@pytest.fixture
def rpm_served(rpm_upstream: Path, repo_key: RepoKey, tmp_path: Path) -> Iterator[Server]:
    """A private copy of the rpm upstream, served on 127.0.0.1 (``key``: its signing key's fingerprint)."""
    for server in serve_copy(rpm_upstream, tmp_path):
        server.key = repo_key.fingerprint
        yield server


def manifest(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return data


def build(served: Server, tmp_path: Path, *options: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(rhel_spec(served.url, served.key))
    out = tmp_path / "bundle"
    return out, run_bundle(str(spec_file), "-o", str(out), *options)


def bundle_pin(out: Path) -> str:
    """The bundle key fingerprint the build printed for the operator to pin."""
    fingerprint: str = manifest(out)["signing"]["fingerprint"]
    return fingerprint


@pytest.fixture
def dnf_root(tmp_path: Path) -> Iterator[Path]:
    """The install root of ``dnf`` runs; afterwards the gpg-agents dnf started for its key rings
    (one per repository, under the root) are stopped, and none may be left."""
    root = tmp_path / "dnf"
    try:
        yield root
    finally:
        for home in sorted(root.rglob("pubring")):
            if home.is_dir():
                subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False)
    # gpgconf --kill asks the agent to stop and returns; on a busy machine it exits a moment later.
    deadline = time.monotonic() + 10
    while True:
        left = subprocess.run(["pgrep", "-f", f"gpg-agent --homedir {root}"], capture_output=True, text=True).stdout
        if left == "" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == "", f"gpg-agents left running: {left}"


def dnf(root: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real dnf in an install root of its own, with the bundle's repositories as a RHEL node gets them."""
    repos = root / "yum.repos.d"
    if not repos.is_dir():
        repos.mkdir(parents=True)
        for kind in ("nvidia-cuda", "nvidia-container", "docker-ce", "epel"):
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
    assert set(repos) == {CUDA, CONTAINER, DOCKER, EPEL}
    for path, pinned in PINNED.items():
        got = {p["package"]: p["version"] for p in repos[path]["packages"]}
        assert got == pinned, path
        assert {e["dependency"]: e["required_by"] for e in repos[path]["external"]} == EXTERNAL[path], path
        rpms = sorted(p.name for p in (out / path).glob("*.rpm"))
        assert rpms == sorted(p["path"].rsplit("/", 1)[1] for p in repos[path]["packages"])
    # Trust: the toolkit's signed repomd.xml; CUDA's and Docker's signed packages.
    checked = {path: r["sources"][0]["checked"] for path, r in repos.items()}
    assert checked[CONTAINER] == "repomd.xml.asc" and repos[CONTAINER]["sources"][0]["signed_by"]
    assert checked[CUDA] == checked[DOCKER] == checked[EPEL] == "each package's signature (rpmkeys)"
    assert "checked: each package's signature (rpmkeys)" in cp.stdout
    # The bundle's own metadata: signed with the bundle key, covering every file.
    assert m["signing"]["rpm_key"] == BUNDLE_RPM_KEY and (out / BUNDLE_RPM_KEY).is_file()
    for path in PINNED:
        assert (out / path / REPOMD_SIG).is_file()
    modules = list((out / CUDA / "repodata").glob("*-modules.yaml.gz"))
    assert len(modules) == 1  # only the stream the nodes enable (checked with dnf below)
    assert verify_bundle(out, bundle_pin(out)) == []
    for name in RHEL_ARTIFACTS:
        assert (out / "artifacts" / name).is_file()


def test_dnf_reads_the_bundle_as_a_rhel_node_does(rpm_served: Server, tmp_path: Path, dnf_root: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    root = dnf_root
    listed = dnf(root, out, "module", "list", "nvidia-driver")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "550-open" in listed.stdout and "575-open" not in listed.stdout
    enable = dnf(root, out, "module", "enable", "nvidia-driver:550-open")
    assert enable.returncode == 0, enable.stdout + enable.stderr
    # A modular package installs once its stream is enabled; the toolkit at its pin.
    inst = dnf(root, out, "install", "nvidia-driver-libs-550.163.01", "nvidia-container-toolkit-1.20.0")
    assert inst.returncode == 0, inst.stdout + inst.stderr
    q = subprocess.run(
        ["rpm", "--root", str(root / "sysroot"), "-qa", "--qf", "%{NAME}-%{VERSION}\\n"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert set(q.stdout.split()) == {
        "nvidia-driver-libs-550.163.01",
        "nvidia-container-toolkit-1.20.0",
        "nvidia-container-toolkit-base-1.20.0",
    }


def test_dnf_refuses_a_changed_bundle_index(rpm_served: Server, tmp_path: Path, dnf_root: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    repomd = out / CONTAINER / REPOMD
    repomd.write_bytes(repomd.read_bytes().replace(b"<revision>", b"<revision>1"))
    refused = dnf(dnf_root, out, "--disablerepo=*", "--enablerepo=gpuforge-nvidia-container", "makecache")
    assert refused.returncode != 0
    assert "GPG signature verification error" in refused.stdout + refused.stderr
    assert any(p.startswith(f"{CONTAINER}/{REPOMD}: ") for p in verify_bundle(out, bundle_pin(out)))


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


def test_a_mirror_key_other_than_the_pinned_one_checks_no_package(rpm_served: Server, tmp_path: Path) -> None:
    """Mirror mode, packages signed (EPEL, Docker): a key the mirror serves in place of the pinned
    one is refused before rpmkeys imports it, so no package it signed is taken."""
    other = RepoKey(tmp_path / "other-gnupg", "mirror-attacker")
    try:
        (rpm_served.root / "epel" / src.EPEL_KEY).write_bytes(other.armored())
    finally:
        other.close()
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 1
    missing = {x["what"]: x["error"] for x in manifest(out)["missing"]}
    assert f"holds key {other.fingerprint}, not the pinned {rpm_served.key}" in missing[f"{EPEL}: repodata"]
    assert not any(p.endswith(".rpm") and "/epel/" in p for p in rpm_served.requests)
    # Without the site's pins, each mirror is held to upstream's key (epel9-key, docker-rhel-key, ...).
    unpinned = spec_needs(parse_spec(rhel_spec(rpm_served.url, None)))
    assert {n.kind: n.fingerprint for n in unpinned.repos.values()} == {
        kind: table.RPM_REPO_FINGERPRINTS[kind] for kind in ("nvidia-cuda", "nvidia-container", "docker-ce", "epel")
    }


def test_a_rerun_with_no_change_rewrites_nothing(rpm_served: Server, tmp_path: Path) -> None:
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"}
    first = manifest(out)["signing"]["fingerprint"]
    out, cp = build(rpm_served, tmp_path, "--fingerprint", first)  # the key the operator pinned
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert " 0 downloaded" in cp.stdout
    after = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert after == before
    assert manifest(out)["signing"]["fingerprint"] == first


def test_a_fresh_rhel_node_installs_the_nvidia_stack_from_the_bundle(rpm_served: Server, tmp_path: Path) -> None:
    """Offline mode on the RHEL bundle: every repository is the pushed bundle, checked with the
    bundle key; every NVIDIA/EPEL package the plan installs is in it at the planned version."""
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    offline = f"  mode: offline\n  bundle_dir: {out}\n  bundle_fingerprint: {bundle_pin(out)}"
    spec = parse_spec(rhel_spec(rpm_served.url, None, offline))
    node = next(x for x in resolve_nodes(spec) if x.name == "gpu01")
    host = HostFacts(gpus=["2330"] * 8, package_tool="rpm", kernel_release="5.14.0-503.el9.x86_64")
    ctx = nvidia_needs.Ctx.build(spec, node, host, name="test-gpu01")
    plans = {layer.name: plan_layer(layer, LayerFacts())[0] for _, layer in nv.nvidia_layers(ctx)}
    steps = [s for layer in plans.values() for s in layer]
    assert [s.summary for s in steps if s.kind == "unavailable"] == []
    for s in steps:
        assert "http://" not in (s.command or "") and "https://" not in (s.command or ""), s
    uploads = {s.upload.path: s.upload.data for s in steps if s.upload is not None}
    # Every repository file: the bundle, metadata signed by the bundle key.
    key = f"gpgkey=file://{src.BUNDLE_ON_NODE}/{BUNDLE_RPM_KEY}"
    for path, kind in (
        (src.CUDA_REPO_FILE, "nvidia-cuda"),
        (src.CONTAINER_REPO_FILE, "nvidia-container"),
        (src.DOCKER_REPO_FILE, "docker-ce"),
        (src.EPEL_REPO_FILE, "epel"),
    ):
        text = uploads[path].decode()
        assert f"baseurl=file://{src.BUNDLE_ON_NODE}/rpm/{kind}\n" in text, path
        assert "\nrepo_gpgcheck=1\n" in text and f"\n{key}\n" in text, path
    assert uploads[f"{src.BUNDLE_ON_NODE}/{BUNDLE_RPM_KEY}"] == (out / BUNDLE_RPM_KEY).read_bytes()
    for kind in ("nvidia-cuda", "nvidia-container", "docker-ce", "epel"):
        for f in (out / "rpm" / kind).rglob("*"):
            if f.is_file():
                rel = f.relative_to(out).as_posix()
                assert uploads[f"{src.BUNDLE_ON_NODE}/{rel}"] == f.read_bytes(), rel
    # The driver stream dnf enables is the one the bundle carries; the pinned packages are there.
    commands = " ".join(s.command or "" for s in steps)
    assert "dnf -y module enable nvidia-driver:550-open" in commands
    bundled = {p["package"]: p["version"] for r in manifest(out)["repositories"] for p in r["packages"]}
    assert "nvidia-open-550.163.01" in commands and bundled["nvidia-open"].startswith("3:550.163.01-")
    for name in ("dkms", "datacenter-gpu-manager-4-core", "nvidia-container-toolkit"):
        assert name in commands and name in bundled, name


def test_a_rhel_bundle_without_rpmkeys_is_refused_before_fetching(rpm_served: Server, tmp_path: Path) -> None:
    """gpg is there, rpm's tools are not: RHEL nodes' package signatures could not be checked."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("gpg", "gpgv", "gpgconf"):
        (bare / tool).symlink_to(shutil.which(tool) or tool)
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(rhel_spec(rpm_served.url, rpm_served.key))
    cp = run_bundle(str(spec_file), "-o", str(tmp_path / "out"), env={**cli_env(), "PATH": str(bare)})
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "rpmkeys, rpm, which this host lacks" in cp.stderr
    assert rpm_served.requests == [] and not (tmp_path / "out").exists()


def _relist(out: Path, signer: BundleSigner, rel: str, data: bytes | None) -> None:
    """Change (or, with None, remove) one bundle file, list it in the manifest as it now is, and
    sign the manifest with ``signer`` (the pinned key: only the repositories' signatures are wrong)."""
    m = manifest(out)
    m["files"] = [f for f in m["files"] if f["path"] != rel]
    if data is None:
        (out / rel).unlink()
    else:
        (out / rel).write_bytes(data)
        m["files"].append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)})
    raw = json.dumps(m).encode()
    (out / MANIFEST).write_bytes(raw)
    (out / MANIFEST_SIG).write_bytes(signer.detach_sign(raw))


def test_verify_checks_the_rpm_signatures_not_only_the_manifest(rpm_served: Server, tmp_path: Path) -> None:
    """A bundle whose manifest the pinned key signed as rewritten is still refused: the
    repositories' signatures do not match."""
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    with BundleSigner("the operator's test key") as signer:  # stands for the build's key, gone now
        pin = signer.fingerprint()
        sign_repositories(signer, out, [], lambda rel, data: (out / rel).write_bytes(data), list(PINNED))
        for rel in (BUNDLE_KEY, BUNDLE_RPM_KEY, *(f"{path}/{REPOMD_SIG}" for path in PINNED)):
            _relist(out, signer, rel, (out / rel).read_bytes())
        assert verify_bundle(out, pin) == []
        _relist(out, signer, f"{EPEL}/{REPOMD_SIG}", None)
        assert verify_bundle(out, pin) == [f"{EPEL}/{REPOMD_SIG}: missing (the repository is not signed)"]
        other = RepoKey(tmp_path / "other-gnupg", "someone-else")
        try:
            signature = other.gpg("--armor", "--detach-sign", data=(out / EPEL / REPOMD).read_bytes())
            _relist(out, signer, f"{EPEL}/{REPOMD_SIG}", signature)
            _relist(out, signer, BUNDLE_RPM_KEY, other.armored())
        finally:
            other.close()
    problems = verify_bundle(out, pin)
    assert problems[0].startswith(f"{EPEL}/{REPOMD_SIG}: the signature does not verify")
    assert problems[1:] == [f"{BUNDLE_RPM_KEY}: not the key in apt/gpuforge-bundle.gpg"]


def test_a_new_pin_replaces_the_old_packages_and_metadata(rpm_served: Server, tmp_path: Path) -> None:
    """The deploys push rpm/<repo>/ whole: after a pin change no old package or index file stays."""
    out, cp = build(rpm_served, tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    old = {p.relative_to(out).as_posix() for p in (out / CONTAINER).rglob("*") if p.is_file()}
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(spec_file.read_text().replace("container_toolkit: 1.20.0", "container_toolkit: 1.21.0"))
    cp = run_bundle(str(spec_file), "-o", str(out))
    # libnvidia-container1 and -tools are not in the test repository at 1.21.0: the rest moves on
    new = {p.relative_to(out).as_posix() for p in (out / CONTAINER).rglob("*") if p.is_file()}
    rpms = sorted(r.rsplit("/", 1)[1] for r in new if r.endswith(".rpm"))
    assert rpms == [
        "libnvidia-container1-1.21.0-1.x86_64.rpm",
        "nvidia-container-toolkit-1.21.0-1.x86_64.rpm",
        "nvidia-container-toolkit-base-1.21.0-1.x86_64.rpm",
    ], cp.stdout + cp.stderr
    stale = {r for r in old - new if "/repodata/" in r}
    assert stale and not (stale & new)  # the old primary/filelists/other are gone, not left beside
    listed = {f["path"] for f in manifest(out)["files"]}
    assert {r for r in new} <= listed

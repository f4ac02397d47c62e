"""Where NVIDIA packages and artifacts come from (pure), the NvidiaHost fact, layer wiring."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, plan_layer
from gpuforge.deploy.facts.nvidia import NvidiaHost
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.deploy.layers.nvidia.common import mark_reboot, pyxis_rebuilt
from gpuforge.deploy.runstate import RunState
from gpuforge.probes.nvidia_host import HostFacts, nvidia_host_command, parse_nvidia_host
from gpuforge.render import nvidia_sources as src
from gpuforge.spec import Spec, load_spec, parse_spec, resolve_nodes
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import OsFamily
from gpuforge.spec.platforms import platform_for
from gpuforge.spec.roles import LAYER_ORDER
from tests import yaml_text
from tests.helpers import bundle_fingerprint, write_bundle_manifest

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "inventories" / "slurm-h100.yaml"
LAB = REPO / "inventories" / "lab.yaml"


def variant(path: Path, **sources: object) -> Spec:
    data = yaml.safe_load(path.read_text())
    data["sources"] = sources
    return parse_spec(yaml_text.dump(data))


# --------------------------------------------------------------------------- repositories


@pytest.mark.parametrize(
    ("os_family", "url"),
    [
        (OsFamily.UBUNTU2204, "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"),
        (OsFamily.UBUNTU2404, "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64"),
        (OsFamily.DEBIAN12, "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"),
        (OsFamily.RHEL9, "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64"),
    ],
)
def test_cuda_repo_upstream(os_family: OsFamily, url: str) -> None:
    repo = src.cuda_repo(variant(H100, mode="upstream"), platform_for(os_family))
    assert repo.url == url
    key = "cuda-keyring_1.1-1_all.deb" if os_family.is_deb else "D42D0685.pub"
    assert repo.key_url == f"{url}/{key}"


def test_cuda_repo_mirror_expands_distro_and_trailing_slash() -> None:
    s = variant(H100, mode="mirror", mirrors={"nvidia_cuda": "http://m.example/cuda/{distro}/x86_64/"})
    assert src.cuda_repo(s, platform_for(OsFamily.RHEL9)).url == "http://m.example/cuda/rhel9/x86_64"
    assert (
        src.cuda_repo(s, platform_for(OsFamily.UBUNTU2404)).key_url
        == "http://m.example/cuda/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb"
    )


def test_mirror_mode_never_falls_back_to_upstream() -> None:
    s = variant(H100, mode="mirror", apt_proxy="http://10.0.0.1:3142")
    for repo in (src.cuda_repo(s, platform_for(OsFamily.UBUNTU2404)), src.container_repo(s, OsFamily.UBUNTU2404)):
        assert not repo.available and repo.url is None
        assert "mirror mode without sources.mirrors." in (repo.reason or "")
    enroot = src.enroot_artifacts(s, platform_for(OsFamily.DEBIAN12))
    assert all(not a.available and "sources.mirrors.artifacts" in (a.reason or "") for a in enroot)


def test_container_repo_urls() -> None:
    up = variant(H100, mode="upstream")
    assert (
        src.container_repo(up, OsFamily.UBUNTU2404).url
        == "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
    )
    assert (
        src.container_repo(up, OsFamily.RHEL9).url
        == "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch"
    )
    assert src.container_repo(up, OsFamily.RHEL9).key_url == "https://nvidia.github.io/libnvidia-container/gpgkey"
    mirror = load_spec(H100)
    repo = src.container_repo(mirror, OsFamily.UBUNTU2404)
    assert repo.url == "http://192.0.2.5/nvidia/libnvidia-container/stable/deb/amd64"
    assert repo.key_url == f"{repo.url}/gpgkey"
    assert src.apt_list_line(repo, src.CONTAINER_KEYRING) == (
        f"deb [signed-by={src.CONTAINER_KEYRING}] http://192.0.2.5/nvidia/libnvidia-container/stable/deb/amd64/ /\n"
    )


def test_offline_repos_and_artifacts_come_from_the_bundle(tmp_path: Path) -> None:
    (tmp_path / "apt" / "nvidia-container").mkdir(parents=True)
    (tmp_path / "apt" / "nvidia-container" / "Packages").write_text("Package: x\n")
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "pyxis-0.24.0.tar.gz").write_bytes(b"tgz")
    sums = write_bundle_manifest(tmp_path)
    pins = {"pyxis-0.24.0.tar.gz": sums["artifacts/pyxis-0.24.0.tar.gz"]}
    s = variant(
        H100,
        mode="offline",
        bundle_dir=str(tmp_path),
        bundle_fingerprint=bundle_fingerprint(tmp_path),
        artifact_sha256=pins,
    )
    repo = src.container_repo(s, OsFamily.UBUNTU2404)
    assert repo.url == "/var/lib/gpuforge/bundle/apt/nvidia-container" and repo.bundle is not None
    assert src.apt_list_line(repo, src.CONTAINER_KEYRING) == (
        "deb [signed-by=/etc/apt/keyrings/gpuforge-bundle.gpg] file:/var/lib/gpuforge/bundle/apt/nvidia-container ./\n"
    )
    pushed = dict(src.bundle_files(repo.bundle))
    assert sorted(pushed) == ["InRelease", "Packages"]  # the index and the bundle's signature over it
    assert Path(pushed["Packages"].path).read_bytes() == b"Package: x\n"
    bundle_key = src.bundle_key(s)
    assert bundle_key is not None and bundle_key.path == str(tmp_path / "apt" / "gpuforge-bundle.gpg")
    assert not src.cuda_repo(s, platform_for(OsFamily.UBUNTU2404)).available  # not in the bundle
    pyxis = src.pyxis_artifact(s)
    assert pyxis.local is not None and pyxis.node_path == "/var/lib/gpuforge/bundle/pyxis-0.24.0.tar.gz"
    node_path = "/var/lib/gpuforge/bundle/pyxis-0.24.0.tar.gz"
    assert src.fetch_command(pyxis) == (
        f"test -s {node_path} && echo '{sums['artifacts/pyxis-0.24.0.tar.gz']}  {node_path}' | sha256sum -c --quiet -"
    )
    assert not src.enroot_artifacts(s, platform_for(OsFamily.DEBIAN12))[0].available
    unpinned = src.pyxis_artifact(variant(H100, mode="offline", bundle_dir=str(tmp_path), bundle_fingerprint="A" * 40))
    assert unpinned.local is None and "sources.artifact_sha256" in (unpinned.reason or "")
    other = variant(
        H100,
        mode="offline",
        bundle_dir=str(tmp_path),
        bundle_fingerprint="A" * 40,
        artifact_sha256={"pyxis-0.24.0.tar.gz": "0" * 64},
    )
    assert "is not " + "0" * 64 in (src.pyxis_artifact(other).reason or "")  # the manifest lists other bytes


def test_dnf_repo_files() -> None:
    s = variant(H100, mode="upstream")
    text = src.dnf_repo_file(src.cuda_repo(s, platform_for(OsFamily.RHEL9)), "c", "CUDA")
    assert "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64\n" in text
    assert "gpgcheck=1" in text and "repo_gpgcheck" not in text


# --------------------------------------------------------------------------- artifacts


def test_release_urls_per_mode() -> None:
    up = variant(H100, mode="upstream")
    names = [a.url for a in src.enroot_artifacts(up, platform_for(OsFamily.UBUNTU2404))]
    assert names == [
        "https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot_4.1.2-1_amd64.deb",
        "https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot+caps_4.1.2-1_amd64.deb",
    ]
    rpms = [a.name for a in src.enroot_artifacts(up, platform_for(OsFamily.RHEL9))]
    assert rpms == ["enroot-4.1.2-1.el8.x86_64.rpm", "enroot+caps-4.1.2-1.el8.x86_64.rpm"]
    assert src.pyxis_artifact(up).url == "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"
    mirror = load_spec(H100)
    assert src.pyxis_artifact(mirror).url == "http://192.0.2.5/artifacts/pyxis-0.24.0.tar.gz"


def test_dcgm_exporter_is_a_cuda_repository_package_held_at_its_exporter_version() -> None:
    """Issue 32 item 2: before, dcgm-exporter was a release file 'NVIDIA publishes no binary' (mirror or
    bundle only), so upstream mode had no exporter at all. Now: datacenter-gpu-manager-exporter, pinned."""
    assert not hasattr(src, "dcgm_exporter_artifact")
    pin = src.dcgm_exporter_pin("4.6.0-4.8.3")
    assert "Package: datacenter-gpu-manager-exporter\nPin: version 4.8.3-*\n" in pin
    assert {"dcgm-exporter-install", "dcgm-exporter-unit", "dcgm-exporter-repo-files"} <= set(table.SOURCES)


def test_fetch_checks_the_download_before_moving_it_into_place() -> None:
    a = src.Artifact("f.deb", url="https://example.invalid/f.deb", sha256="ab" * 32)
    cmd = src.fetch_command(a)
    part = f"{a.node_path}.part"
    assert "curl -fsSL --retry 3" in cmd and f"-o {part}" in cmd
    check = f"echo '{'ab' * 32}  {part}' | sha256sum -c --quiet -"
    assert cmd.index(check) < cmd.index(f"mv {part} {a.node_path}")
    assert cmd.endswith(f"&& mv {part} {a.node_path}")
    for unchecked in (
        src.Artifact("g.deb", url="https://example.invalid/g.deb"),  # no sha256: never fetched
        src.Artifact("h.deb", reason="none"),
        src.Artifact("i.deb", url="https://example.invalid/i.deb", sha256="ab" * 32, reason="no"),
    ):
        assert not unchecked.available
        with pytest.raises(ValueError):
            src.fetch_command(unchecked)


# --------------------------------------------------------------------------- Debian non-free

MAIN_ONLY = (
    "deb http://deb.debian.org/debian bookworm main\ndeb http://deb.debian.org/debian-security bookworm-security main\n"
)


def test_nonfree_from_one_line_sources() -> None:
    text = src.debian_nonfree_sources([MAIN_ONLY], "bookworm")
    assert text is not None
    assert (
        "URIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: contrib non-free non-free-firmware\n" in text
    )
    assert "URIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n" in text


def test_nonfree_only_missing_components_and_none_when_complete() -> None:
    partial = "deb [signed-by=/k.gpg] http://deb.debian.org/debian bookworm main non-free-firmware\n"
    assert "Components: contrib non-free\n" in (src.debian_nonfree_sources([partial], "bookworm") or "")
    full = partial.replace("non-free-firmware", "contrib non-free non-free-firmware")
    assert src.debian_nonfree_sources([full], "bookworm") is None
    assert src.debian_nonfree_sources([""], "bookworm") is None


def test_nonfree_deb822_disabled_stanza_and_mirror_override() -> None:
    text = (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Enabled: no\nTypes: deb\nURIs: http://old.example/debian\nSuites: bookworm\nComponents: main\n"
    )
    assert [e.uri for e in src.parse_apt_sources(text)] == ["http://deb.debian.org/debian"]
    out = src.debian_nonfree_sources([text], "bookworm", mirror="http://mirror.example/debian/")
    assert out is not None and "URIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n" in out
    assert "deb.debian.org" not in out


def test_nonfree_follows_the_node_release_suite() -> None:
    """A Debian 13 node's own sources name trixie: the non-free stanza repeats trixie's, not bookworm's."""
    from gpuforge.spec.platforms import OsFamily

    trixie = MAIN_ONLY.replace("bookworm", "trixie")
    suite = OsFamily.DEBIAN13.distribution.codename
    assert suite == "trixie"
    text = src.debian_nonfree_sources([trixie], suite)
    assert text is not None and "Suites: trixie\n" in text and "Suites: trixie-security\n" in text
    assert "bookworm" not in text
    assert src.debian_nonfree_sources([trixie], "bookworm") is None  # what a fixed bookworm suite would do


def test_version_matches() -> None:
    assert src.version_matches("535.261.03-1~deb12u1", "535.261.03")
    assert src.version_matches("1:4.2.3-1", "4.2.3")
    assert src.version_matches("550.163.01", "550.163.01")
    assert not src.version_matches("550.163.011-1", "550.163.01")
    assert not src.version_matches(None, "1")


# --------------------------------------------------------------------------- NvidiaHost fact


def test_nvidia_host_fact_parses_pci_driver_and_packages() -> None:
    cmd = NvidiaHost().command(["enroot", "enroot+caps"])
    assert cmd == nvidia_host_command(["enroot", "enroot+caps"])
    assert "/sys/bus/pci/devices" in cmd and "/sys/module/nvidia/version" in cmd and "__query=enroot enroot+caps" in cmd
    lines = [
        "__section=pci",
        "0000:1b:00.0 0x030200 0x2330",
        "0000:43:00.0 0x030200 0x2330",
        "0000:07:00.0 0x068000 0x22a3",
        "0000:1b:00.1 0x040300 0x22ba",
        "__rc=0",
        "__section=driver",
        "550.163.01",
        "__section=kernel",
        "5.15.0-126-generic",
        "__section=secureboot",
        "SecureBoot enabled",
        "__section=packages",
        "__query=enroot enroot+caps",
        "__tool=dpkg",
        "enroot\t3.5.0-1\tii ",
        "enroot+caps\t3.4.1-1\trc ",
    ]
    hf = parse_nvidia_host(lines)
    assert hf.gpus == ["2330", "2330"] and hf.nvswitches == ["22a3"]
    assert hf.loaded_driver == "550.163.01" and hf.driver_loaded and hf.gpu_present
    assert hf.packages == {"enroot": "3.5.0-1", "enroot+caps": None} and hf.package_tool == "dpkg"
    assert hf.kernel_release == "5.15.0-126-generic" and hf.secure_boot is True


def test_nvidia_host_fact_on_a_gpu_less_node() -> None:
    hf = parse_nvidia_host(
        [
            "__section=pci",
            "__section=driver",
            "__section=kernel",
            "6.1.0-28-amd64",
            "__section=secureboot",
            "__section=packages",
        ]
    )
    assert hf.kernel_release == "6.1.0-28-amd64" and hf.secure_boot is None  # no mokutil: unknown
    assert hf == HostFacts(kernel_release="6.1.0-28-amd64")
    assert not hf.gpu_present and not hf.driver_loaded
    with pytest.raises(ValueError):
        nvidia_host_command(["ok", "bad;rm"])


# --------------------------------------------------------------------------- wiring


def test_nvidia_runs_between_munge_and_slurm() -> None:
    assert LAYER_ORDER.index("munge") < LAYER_ORDER.index("nvidia") < LAYER_ORDER.index("slurm")


@pytest.mark.parametrize("path", sorted((REPO / "inventories").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_node_gets_the_same_eight_operations(path: Path) -> None:
    s = load_spec(path)
    for n in resolve_nodes(s):
        hf = HostFacts(gpus=["2330"] * n.hardware.gpu_count)
        layers = nv.nvidia_layers(nvidia_needs.Ctx.build(s, n, hf))
        assert [layer.name for _, layer in layers] == list(nv.LAYER_NAMES)
        for _, layer in layers:
            plan_layer(layer, LayerFacts())  # plans without facts (a fresh node) without raising
    assert [layer.name for _, layer in nv.nvidia_layers(None)] == list(nv.LAYER_NAMES)


def test_the_gpu_less_lab_spec_gets_no_nvidia_layer() -> None:
    """The shipped lab spec has no GPUs and no container engine: the Slurm lab is untouched."""
    s = load_spec(LAB)
    for n in resolve_nodes(s):
        assert all(layer.is_empty for _, layer in nv.nvidia_layers(nvidia_needs.Ctx.build(s, n)))
        assert not nvidia_needs.needs_host_facts(s, n)


def test_rhel_nodes_read_rpm_versions_through_the_host_fact() -> None:
    data = yaml.safe_load(H100.read_text())
    data["cluster"]["os"] = "rhel9"
    s = parse_spec(yaml_text.dump(data))
    n = next(x for x in resolve_nodes(s) if x.name == "gpu001")
    names = nvidia_needs.host_packages(s, n)
    assert {"nvidia-driver", "nvidia-fabric-manager", "nvidia-container-toolkit", "cuda-toolkit-12-4"} <= set(names)
    assert nvidia_needs.needs_host_facts(s, n)
    layer = nv.driver_layer(nvidia_needs.Ctx.build(s, n, HostFacts(gpus=["2330"])))
    assert layer.packages == ()  # never apt-get on rhel


def test_reboot_marker_is_written_once() -> None:
    first = mark_reboot(["driver 1 -> 2: reboot"], None)
    assert first[0].kind == "reboot-required" and "reboot-required" in (first[0].command or "")
    again = mark_reboot(["driver 1 -> 2: reboot"], "driver 1 -> 2: reboot\n")
    assert again[0].command is None


def test_pyxis_rebuilt_reads_the_runs_changed_paths() -> None:
    run = RunState()
    run.record_changed("n1", "pyxis", {"/var/lib/gpuforge/bundle/pyxis-0.24.0.tar.gz"})
    assert not pyxis_rebuilt(run, "n1")
    run.record_changed("n1", "pyxis", {"/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pyxis.so"})
    assert pyxis_rebuilt(run, "n1")
    assert not pyxis_rebuilt(run, "n2")
    assert not pyxis_rebuilt(RunState(), "n1")  # a new run starts with no records


def test_offline_artifacts_are_pushed_only_when_listed_and_regular(tmp_path: Path) -> None:
    """A file the manifest does not list, or a symbolic link, is never pushed to a node."""
    arts = tmp_path / "artifacts"
    arts.mkdir()
    (arts / "pyxis-0.24.0.tar.gz").write_bytes(b"tgz")
    pins = {"pyxis-0.24.0.tar.gz": hashlib.sha256(b"tgz").hexdigest()}
    s = variant(H100, mode="offline", bundle_dir=str(tmp_path), bundle_fingerprint="A" * 40, artifact_sha256=pins)
    unlisted = src.pyxis_artifact(s)
    assert unlisted.local is None and "not in the bundle's manifest" in (unlisted.reason or "")
    write_bundle_manifest(tmp_path)
    assert src.pyxis_artifact(s).local is not None
    (arts / "pyxis-0.24.0.tar.gz").unlink()
    (arts / "pyxis-0.24.0.tar.gz").symlink_to("/dev/zero")
    linked = src.pyxis_artifact(s)
    assert linked.local is None and "regular file" in (linked.reason or "")

"""Grace (aarch64) and Rocky 9 nodes plan what upstream serves them, read from the platform table.

Expected values are written from the citations in ``gpuforge/spec/platform_sources.py``:
NVIDIA's CUDA repositories for Arm servers are ``<distro>/sbsa`` (cuda-repos-sbsa), the container
toolkit's apt path names dpkg's architecture (``stable/deb/arm64``, container-toolkit-arch),
enroot's release files name it too (``enroot_<v>-1_arm64.deb``, enroot-arch), Ubuntu's Slurm
loads plugins from the multiarch directory (debian-slurm-plugins), and Rocky 9 uses NVIDIA's
``rhel9`` repositories with the dnf module streams (guide-el-distributions).
"""

from __future__ import annotations

import pytest

from gpuforge.bundle.downloads import spec_needs
from gpuforge.deploy import nvidia_needs
from gpuforge.deploy.converge import LayerFacts, StepKind, plan_layer
from gpuforge.deploy.layers import nvidia as nv
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render.files import Secrets
from gpuforge.render.nvidia_repos import epel_wanted, nvidia_repo_files
from gpuforge.render.slurm import slurm_files
from gpuforge.spec import Spec, parse_spec, resolve_nodes
from gpuforge.spec.nodes import Node
from gpuforge.spec.platforms import Arch, OsFamily

CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"

SPEC = """
cluster: {{name: t, scheduler: slurm, os: {os}}}
versions:
  driver: {{version: 580.105.08, source: nvidia, flavor: open}}
  enroot: 4.1.2
  pyxis: 0.24.0
  dcgm: 4.6.0
  dcgm_exporter: 4.6.0-4.8.3
sources: {{mode: upstream}}
node_groups:
  - name: ctl
    hosts: ctl1
    roles: [controller]
  - name: gpu
    hosts: gpu[1-2]
    roles: [compute]
    arch: {arch}
    hardware:
      gpu: {{model: {model}, count: {count}}}
      sockets: 1
      cores_per_socket: 4
      threads_per_core: 1
      real_memory_mb: 8000
slurm:
  accounting: {{enabled: false}}
  containers: {{pyxis: true}}
  partitions:
    - {{name: batch, nodes: gpu}}
"""


def spec(os: str, arch: str, model: str, count: int) -> Spec:
    return parse_spec(SPEC.format(os=os, arch=arch, model=model, count=count))


@pytest.fixture(scope="module")
def gh200() -> Spec:
    return spec("ubuntu24.04", "aarch64", "GH200-96GB", 1)


@pytest.fixture(scope="module")
def rocky() -> Spec:
    return spec("rocky9", "x86_64", "H100-80GB", 8)


def gpu_node(s: Spec) -> Node:
    return next(n for n in resolve_nodes(s) if n.name == "gpu1")


def rendered(s: Spec, node: Node) -> dict[str, str]:
    return {f.path: f.data.decode() for f in nvidia_repo_files(s, node)}


def test_grace_node_resolves_to_the_arm_platform(gh200: Spec) -> None:
    p = gpu_node(gh200).platform
    assert (p.os, p.arch) == (OsFamily.UBUNTU2404, Arch.AARCH64)
    assert (p.cuda_repo_path, p.package_arch, p.names.go) == ("ubuntu2404/sbsa", "arm64", "arm64")


def test_grace_node_gets_the_sbsa_cuda_repository(gh200: Spec) -> None:
    files = rendered(gh200, gpu_node(gh200))
    cuda = files["/etc/apt/sources.list.d/gpuforge-nvidia-cuda.list"]
    assert f"{CUDA}/ubuntu2404/sbsa/ /" in cuda
    assert "x86_64" not in cuda
    # the container toolkit's list names $(ARCH): apt puts in dpkg's architecture (arm64 on Grace)
    container = files["/etc/apt/sources.list.d/gpuforge-nvidia-container.list"]
    assert "libnvidia-container/stable/deb/$(ARCH)/ /" in container


def test_x86_node_keeps_the_x86_64_repository() -> None:
    s = spec("ubuntu24.04", "x86_64", "H100-80GB", 8)
    cuda = rendered(s, gpu_node(s))["/etc/apt/sources.list.d/gpuforge-nvidia-cuda.list"]
    assert f"{CUDA}/ubuntu2404/x86_64/ /" in cuda


def test_grace_bundle_fetches_arm64_packages_and_release_files(gh200: Spec) -> None:
    needs = spec_needs(gh200)
    urls = {need.kind: need.url for need in needs.repos.values()}
    assert urls["nvidia-cuda"] == f"{CUDA}/ubuntu2404/sbsa"
    assert urls["nvidia-container"] == "https://nvidia.github.io/libnvidia-container/stable/deb/arm64"
    assert {need.platform.arch for need in needs.repos.values()} == {Arch.AARCH64}
    assert {"enroot_4.1.2-1_arm64.deb", "enroot+caps_4.1.2-1_arm64.deb"} <= set(needs.artifacts)
    assert not any("amd64" in name or "x86_64" in name for name in needs.artifacts), sorted(needs.artifacts)


def test_grace_driver_is_the_open_flavor_from_the_sbsa_repository(gh200: Spec) -> None:
    node = gpu_node(gh200)
    host = HostFacts(gpus=["2342"], machine="aarch64", kernel_release="6.8.0-1013-nvidia-64k")
    ctx = nvidia_needs.Ctx.build(gh200, node, host)
    row = nvidia_needs.driver_install(ctx)
    assert row.packages[:2] == ("nvidia-open", "nvidia-dkms-580-open")
    assert "linux-headers-6.8.0-1013-nvidia-64k" in row.prerequisites


def test_pyxis_goes_to_the_multiarch_plugin_directory(gh200: Spec) -> None:
    files = {f.path: f.data.decode() for f in slurm_files(gh200, gpu_node(gh200), Secrets.redacted())}
    line = files["/etc/slurm/plugstack.conf.d/pyxis.conf"].splitlines()[-1]
    assert line == "required /usr/lib/aarch64-linux-gnu/slurm-wlm/spank_pyxis.so"


def test_a_node_of_another_cpu_than_its_group_says_gets_no_driver(gh200: Spec) -> None:
    """uname -m says x86_64 on a node the spec calls aarch64: nothing is installed from the wrong repository."""
    node = gpu_node(gh200)
    ctx = nvidia_needs.Ctx.build(gh200, node, HostFacts(gpus=["2342"], machine="x86_64"))
    layer = dict((layer.name, layer) for _, layer in nv.nvidia_layers(ctx))["nvidia-driver"]
    steps, _ = plan_layer(layer, LayerFacts())
    assert not layer.packages
    refused = [st for st in steps if st.kind == StepKind.UNAVAILABLE]
    assert len(refused) == 1
    assert refused[0].summary == (
        "NVIDIA driver 580.105.08 not installed: gpu1 runs x86_64 but its node group says arch: aarch64 (fix the spec)"
    )


def test_rocky9_uses_nvidias_rhel9_repository_and_epel(rocky: Spec) -> None:
    node = gpu_node(rocky)
    assert node.platform.cuda_repo_path == "rhel9/x86_64"
    assert not node.os.is_deb and epel_wanted(rocky, node)
    repo_file = rendered(rocky, node)["/etc/yum.repos.d/gpuforge-nvidia-cuda.repo"]
    assert f"baseurl={CUDA}/rhel9/x86_64" in repo_file
    ctx = nvidia_needs.Ctx.build(rocky, node, HostFacts(kernel_release="5.14.0-503.14.1.el9_5.x86_64"))
    row = nvidia_needs.driver_install(ctx)
    assert row.packages == ("nvidia-open",)
    assert "kernel-devel-5.14.0-503.14.1.el9_5.x86_64" in row.prerequisites


def test_a_grace_blackwell_node_plans_the_same_arm_stack() -> None:
    """GB200 (Grace Blackwell, 4 GPUs a tray): sbsa repository, arm64 release files, the open modules."""
    s = spec("ubuntu24.04", "aarch64", "GB200", 4)
    node = gpu_node(s)
    cuda = rendered(s, node)["/etc/apt/sources.list.d/gpuforge-nvidia-cuda.list"]
    assert f"{CUDA}/ubuntu2404/sbsa/ /" in cuda
    assert "enroot_4.1.2-1_arm64.deb" in spec_needs(s).artifacts
    host = HostFacts(gpus=["2941"] * 4, machine="aarch64", kernel_release="6.8.0-1021-nvidia-64k")
    row = nvidia_needs.driver_install(nvidia_needs.Ctx.build(s, node, host))
    assert row.packages[:2] == ("nvidia-open", "nvidia-dkms-580-open")

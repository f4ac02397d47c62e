"""Which NVIDIA components a node runs (pure spec decisions), and the package sources and pins
that follow: the apt source lists and preferences (deb) or repo files (rpm) a GPU node gets.

The NVIDIA deploy layers (through ``gpuforge.deploy.nvidia_needs``) and the offline bundle decide
from the same functions.
"""

from __future__ import annotations

from gpuforge.render import fabric
from gpuforge.render import nvidia_sources as src
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.nvidia import (
    ENROOT_ROLES,
    engine_wanted,
    enroot_wanted,
    gpu_node,
    host_dcgm_exporter,
    host_driver,
    toolkit_wanted,
)
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import ConfigMode, DriverSource, Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.slurm_packages import SlurmSource

DRIVER_PIN = "/etc/apt/preferences.d/gpuforge-nvidia-driver"
DCGM_PIN = "/etc/apt/preferences.d/gpuforge-nvidia-dcgm"


def driver_source(spec: Spec, node: Node) -> DriverSource:
    drv = spec.versions.driver
    if drv is not None and drv.source is not None:
        return drv.source
    return table.default_source(node.os)


def pyxis_wanted(spec: Spec, node: Node) -> bool:
    """pyxis on every node whose plugstack.conf names it: compute and login nodes, and in
    configless mode the controllers too (their plugstack.conf is the one served; a ``required``
    plugin that fails to load aborts srun/sbatch there: Slurm's spank(8), src/common/spank.c).
    NVIDIA/deepops runs its pyxis role on the whole Slurm cluster (playbooks/container/pyxis.yml)."""
    if spec.slurm is None or not spec.slurm.containers.pyxis:
        return False
    configless_ctl = spec.slurm.config_mode is ConfigMode.CONFIGLESS and node.has(Role.CONTROLLER)
    return bool(node.roles & ENROOT_ROLES) or configless_ctl


def dcgm_wanted(spec: Spec, node: Node) -> bool:
    return gpu_node(spec, node) and spec.dcgm.enabled


def cuda_repo_wanted(spec: Spec, node: Node) -> bool:
    """Something on this node comes from NVIDIA's CUDA repository."""
    if not gpu_node(spec, node):
        return False
    canonical = (
        node.os.distribution.distro_driver == "ubuntu-archive" and driver_source(spec, node) is DriverSource.DISTRO
    )
    driver = host_driver(spec) and (
        driver_source(spec, node) is DriverSource.NVIDIA
        or (node.hardware.nvswitch and not canonical)  # Canonical's archive has its own fabric manager
        or spec.versions.cuda_toolkit is not None
    )
    return driver or dcgm_wanted(spec, node) or bool(node.mig_config) or fabric.wants_cuda_repo(spec, node)


def epel_wanted(spec: Spec, node: Node) -> bool:
    """RHEL nodes that need EPEL 9: DKMS for the driver, ``parallel`` for enroot, ``slurm-devel`` for pyxis.

    (NVIDIA/ansible-role-nvidia-driver installs EPEL and dkms before the driver; enroot's rpm
    requires ``parallel``; pyxis' rpm build requires ``slurm-devel``: both are EPEL 9 packages.)
    """
    if node.os.is_deb:
        return False
    driver = gpu_node(spec, node) and host_driver(spec)
    return driver or enroot_wanted(spec, node) or pyxis_wanted(spec, node)


def epel_slurm(spec: Spec, node: Node) -> bool:
    """An EL Slurm node whose Slurm is the distribution's: EPEL's ``slurm-*`` packages (``slurm_packages``);
    the packages deploy enables EPEL for it (``deploy.layers.packages.el_repos_layer``)."""
    on = spec.slurm is not None and "slurm" in deploys_for(node)
    return on and spec.slurm is not None and spec.slurm.source is SlurmSource.DISTRO


def epel_monitoring(spec: Spec, node: Node) -> bool:
    """An EL node whose platform row takes its monitoring packages from EPEL (``monitoring_packages``)
    and that installs one: node-exporter anywhere, Prometheus on a monitoring node."""
    if not node.os.distribution.monitoring.epel or "monitoring" not in deploys_for(node):
        return False
    mon = spec.monitoring
    return mon.node_exporter or (mon.prometheus and node.has(Role.MONITORING))


def epel_wanted_early(spec: Spec, node: Node) -> bool:
    """EPEL is enabled by the packages deploy, before munge, Slurm and monitoring install from it."""
    return not node.os.is_deb and (epel_slurm(spec, node) or epel_monitoring(spec, node))


def docker_repo_wanted(spec: Spec, node: Node) -> bool:
    """RHEL nodes running containerd or docker need Docker's repository (containerd.io, docker-ce)."""
    return not node.os.is_deb and engine_wanted(spec, node)


def nvidia_repo_files(spec: Spec, node: Node, secrets: Secrets | None = None) -> list[RenderedFile]:
    """Source lists and pins (deb) or repo files (rpm) for the node's NVIDIA packages.

    Only repositories that are available (configured, or present in the offline bundle); the
    bundle's own repository contents are pushed by the deploy, not rendered here.
    """
    del secrets  # no secrets in this layer
    early_epel = epel_wanted_early(spec, node)
    if not gpu_node(spec, node) and not (epel_wanted(spec, node) or early_epel) and not docker_repo_wanted(spec, node):
        return []
    cuda = src.cuda_repo(spec, node.platform) if cuda_repo_wanted(spec, node) else None
    container = src.container_repo(spec, node.os) if toolkit_wanted(spec, node) else None
    drv = spec.versions.driver
    files: list[RenderedFile] = []
    if node.os.is_deb:
        if host_driver(spec) and drv is not None:
            files.append(RenderedFile(DRIVER_PIN, src.driver_pin(drv.version)))
        if dcgm_wanted(spec, node):
            pin = src.dcgm_pin(spec.versions.dcgm)
            if host_dcgm_exporter(spec):
                pin += "\n" + src.dcgm_exporter_pin(spec.versions.dcgm_exporter)
            files.append(RenderedFile(DCGM_PIN, pin))
        if cuda is not None and cuda.available:
            files.append(RenderedFile(src.CUDA_LIST, src.apt_list_line(cuda, src.CUDA_KEYRING)))
        if container is not None and container.available:
            files.append(RenderedFile(src.CONTAINER_LIST, src.apt_list_line(container, src.CONTAINER_KEYRING)))
    else:
        if cuda is not None and cuda.available:
            text = src.dnf_repo_file(cuda, "gpuforge-nvidia-cuda", "NVIDIA CUDA (gpuforge)")
            files.append(RenderedFile(src.CUDA_REPO_FILE, text))
        if container is not None and container.available:
            text = src.dnf_repo_file(container, "gpuforge-nvidia-container", "NVIDIA container toolkit (gpuforge)")
            files.append(RenderedFile(src.CONTAINER_REPO_FILE, text))
        docker = src.docker_repo(spec, node.os) if docker_repo_wanted(spec, node) else None
        if docker is not None and docker.available:
            text = src.dnf_repo_file(docker, "gpuforge-docker-ce", "Docker CE stable (gpuforge)")
            files.append(RenderedFile(src.DOCKER_REPO_FILE, text))
        epel = src.epel_repo(spec) if epel_wanted(spec, node) or early_epel else None
        if epel is not None and epel.available and epel.url != src.EPEL_RELEASE_RPM:
            files.append(
                RenderedFile(src.EPEL_REPO_FILE, src.dnf_repo_file(epel, "gpuforge-epel", "EPEL 9 (gpuforge)"))
            )
    return files

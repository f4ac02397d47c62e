"""What a node needs from the NVIDIA stack: packages, repositories, components (pure).

The NVIDIA deploy layers (``gpuforge.deploy.layers.nvidia``) build their steps from these, and the
offline bundle (``gpuforge.bundle``) gathers exactly these packages; nothing here imports pyinfra.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuforge.deploy.runstate import RunState
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_repos as repos
from gpuforge.render.files import RenderedFile, Secrets
from gpuforge.render.nvidia import nvidia_files
from gpuforge.render.nvidia_repos import driver_source, enroot_wanted
from gpuforge.spec import Spec
from gpuforge.spec import nvidia_packages as table
from gpuforge.spec.model import DriverFlavor, OsFamily
from gpuforge.spec.nodes import Node
from gpuforge.spec.nvidia_packages import DriverInstall
from gpuforge.spec.platforms import Platform

TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)


@dataclass(frozen=True)
class Ctx:
    """Everything the layer builders know: spec, node, host facts, rendered files."""

    spec: Spec
    node: Node
    host: HostFacts = field(default_factory=HostFacts)
    name: str = ""
    files: dict[str, RenderedFile] = field(default_factory=dict)
    run: RunState = field(default_factory=RunState)
    """The run the layers record their reports in."""

    @classmethod
    def build(
        cls, s: Spec, n: Node, hf: HostFacts | None = None, name: str | None = None, run: RunState | None = None
    ) -> Ctx:
        files = {f.path: f for f in nvidia_files(s, n, Secrets.redacted())}
        return cls(s, n, hf or HostFacts(), name or n.name, files, run if run is not None else RunState())

    @property
    def os(self) -> OsFamily:
        return self.node.os

    @property
    def platform(self) -> Platform:
        return self.node.platform

    @property
    def deb(self) -> bool:
        return self.node.os.is_deb

    @property
    def gpu_node(self) -> bool:
        return repos.gpu_node(self.spec, self.node)

    @property
    def driver_version(self) -> str:
        drv = self.spec.versions.driver
        return drv.version if drv else ""

    @property
    def branch(self) -> str:
        drv = self.spec.versions.driver
        return drv.branch if drv else ""

    def file(self, path: str) -> list[RenderedFile]:
        return [self.files[path]] if path in self.files else []


def toolkit_wanted(ctx: Ctx) -> bool:
    return repos.toolkit_wanted(ctx.spec, ctx.node)


def dcgm_wanted(ctx: Ctx) -> bool:
    return repos.dcgm_wanted(ctx.spec, ctx.node)


def dcgm_packages(ctx: Ctx) -> tuple[str, ...]:
    """DCGM 4 with the diagnostics of the driver's CUDA major (``nvidia_packages.dcgm_packages``)."""
    return table.dcgm_packages(int(ctx.branch))


def cuda_repo_wanted(ctx: Ctx) -> bool:
    return repos.cuda_repo_wanted(ctx.spec, ctx.node)


def driver_install(ctx: Ctx) -> DriverInstall:
    """The node's row of the upstream table (``gpuforge.spec.nvidia_packages``).

    Spec rules refuse combinations nobody ships before any host is touched, so the row exists.
    """
    drv = ctx.spec.versions.driver
    flavor = drv.flavor if drv is not None else DriverFlavor.PROPRIETARY
    return table.driver_install(
        ctx.os, driver_source(ctx.spec, ctx.node), int(ctx.branch), flavor, ctx.host.kernel_release, ctx.node.arch
    )


def driver_packages(ctx: Ctx) -> tuple[str, ...]:
    """Driver packages of this node (deb), the version-carrying one first, then the rest.

    The pinning package (590 and later) and the kernel prerequisites come in the same apt
    transaction: the exact apt preference written before already holds the version.
    """
    return (*driver_repo_packages(ctx), *driver_install(ctx).prerequisites)


def driver_repo_packages(ctx: Ctx) -> tuple[str, ...]:
    """The driver packages that come from the driver's repository (the bundle carries these);
    the kernel prerequisites come from the OS archive."""
    row = driver_install(ctx)
    rest = [p for p in row.packages if p != row.version_package]
    extra = [row.pinning_package] if row.pinning_package else []
    return (row.version_package, *rest, *extra)


def fabric_manager_packages(ctx: Ctx) -> tuple[str, ...]:
    """NVSwitch fabric manager (and NSCQ where the archive splits it out), version carrier first."""
    return driver_install(ctx).fabric_manager


def fabric_manager_from_cuda_repo(ctx: Ctx) -> bool:
    """The fabric manager comes from NVIDIA's CUDA repository (Canonical's archive has its own)."""
    return driver_install(ctx).repository != "ubuntu-archive"


def fabric_manager_package(ctx: Ctx) -> str:
    return fabric_manager_packages(ctx)[0]


def cuda_toolkit_package(ctx: Ctx) -> str | None:
    ver = ctx.spec.versions.cuda_toolkit
    return f"cuda-toolkit-{ver.replace('.', '-')}" if ver else None


def host_packages(s: Spec, n: Node) -> list[str]:
    """Packages whose versions the ``NvidiaHost`` fact reads (those the layer facts cannot)."""
    names = ["enroot", "enroot+caps"] if enroot_wanted(s, n) else []
    if n.os.is_deb and n.mig_config and repos.gpu_node(s, n):
        names.append("nvidia-mig-manager")  # a release file, not a layer package
    if not n.os.is_deb:
        ver = s.versions.cuda_toolkit
        dcgm = table.dcgm_packages(int(s.versions.driver.branch)) if s.versions.driver else ()
        names += ["nvidia-driver", "nvidia-fabric-manager", *TOOLKIT_PACKAGES, *dcgm, table.DCGM_EXPORTER_PACKAGE]
        names += ["nvidia-mig-manager", "slurm-devel", "gcc", "make"]
        names += [pkg for (_, deb), pkg in table.ENGINE_PACKAGES.items() if not deb]
        names += ["nvidia-fabricmanager", "epel-release", "dkms", "python3-dnf-plugin-versionlock"]
        if ver:
            names.append(f"cuda-toolkit-{ver.replace('.', '-')}")
    return names


def needs_host_facts(s: Spec, n: Node) -> bool:
    return n.hardware.gpu is not None or enroot_wanted(s, n) or repos.pyxis_wanted(s, n) or not n.os.is_deb

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
from gpuforge.spec.model import DriverFlavor, DriverSource, OsFamily
from gpuforge.spec.nodes import Node

TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
DCGM_PACKAGES = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary")
# The metapackage pins the rest of the driver; nvidia-smi, the persistence daemon and the GSP
# firmware (H100 and later run only with it) are Recommends, which gpuforge does not install;
# DKMS builds the module against the headers of Debian's current kernel.
DEBIAN_DRIVER_PACKAGES = (
    "nvidia-driver",
    "nvidia-smi",
    "nvidia-persistenced",
    "firmware-nvidia-gsp",
    "linux-headers-amd64",
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


def cuda_repo_wanted(ctx: Ctx) -> bool:
    return repos.cuda_repo_wanted(ctx.spec, ctx.node)


def driver_packages(ctx: Ctx) -> tuple[str, ...]:
    """Driver packages of this node (deb names), the first one carrying the driver version."""
    b = ctx.branch
    drv = ctx.spec.versions.driver
    open_ = "-open" if drv is not None and drv.flavor is DriverFlavor.OPEN else ""
    if driver_source(ctx.spec, ctx.node) is DriverSource.DISTRO:
        return DEBIAN_DRIVER_PACKAGES
    return (f"nvidia-headless-{b}-server{open_}", f"nvidia-utils-{b}-server")


def fabric_manager_package(ctx: Ctx) -> str:
    return f"nvidia-fabricmanager-{ctx.branch}" if ctx.deb else "nvidia-fabric-manager"


def cuda_toolkit_package(ctx: Ctx) -> str | None:
    ver = ctx.spec.versions.cuda_toolkit
    return f"cuda-toolkit-{ver.replace('.', '-')}" if ver else None


def host_packages(s: Spec, n: Node) -> list[str]:
    """Packages whose versions the ``NvidiaHost`` fact reads (those the layer facts cannot)."""
    names = ["enroot", "enroot+caps"] if enroot_wanted(s, n) else []
    if not n.os.is_deb:
        ver = s.versions.cuda_toolkit
        names += ["nvidia-driver", "nvidia-fabric-manager", *TOOLKIT_PACKAGES, *DCGM_PACKAGES]
        names += ["nvidia-mig-manager", "slurm-devel", "gcc", "make", "containerd.io", "docker-ce"]
        if ver:
            names.append(f"cuda-toolkit-{ver.replace('.', '-')}")
    return names


def needs_host_facts(s: Spec, n: Node) -> bool:
    return n.hardware.gpu is not None or enroot_wanted(s, n) or not n.os.is_deb


def rhel_driver_stream(ctx: Ctx) -> str:
    drv = ctx.spec.versions.driver
    return f"{ctx.branch}-open" if drv is not None and drv.flavor is DriverFlavor.OPEN else f"{ctx.branch}-dkms"

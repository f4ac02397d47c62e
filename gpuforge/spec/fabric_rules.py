"""Which nodes have a fabric, and the cross-field rules of ``node_groups[].fabric``.

Rules (each a :class:`SpecIssue` naming its field; ``gpuforge check`` exits 2 on any):

- ``soft_roce`` and ``roce`` (QoS) only with ``type: roce``; ``ipoib`` only with ``type: infiniband``;
- ``stack: doca`` needs ``doca_version`` (and ``doca_version`` needs ``stack: doca``), a platform with a
  cited DOCA repository (not Debian 12), DOCA 3.2.0 or newer on EL 9 (its ``rhel9`` directory), and
  ``doca_key_fingerprint`` outside offline mode; RoCE QoS needs ``stack: doca`` (mlnx_qos);
- NCCL, GDRCopy and nccl-tests on a group with GPUs: a CUDA release (``nccl_cuda`` or
  ``versions.cuda_toolkit``) whose major is at most the driver's; nccl-tests also needs ``nccl``, ``mpi:
  openmpi`` and ``versions.cuda_toolkit`` (nvcc); GDRCopy only where its packages are cited;
- the NCCL-RDMA-SHARP plugin (``sharp_plugin``, GPU groups) only with ``type: infiniband`` (SHARP needs
  Quantum switches), ``stack: doca`` (no distribution package ships it or SHARP; it builds against
  DOCA-Host), an Ubuntu release (its build dependencies are cited there only), ``nccl`` and
  ``versions.cuda_toolkit``;
- IPoIB addresses stay inside their network for every node of the group.

On a group without GPUs, ``peermem``, ``gdrcopy``, ``nccl``, ``nccl_tests`` and ``sharp_plugin`` do
nothing (no error).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from gpuforge.spec import fabric_packages as table
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.fabric import Fabric, FabricType, MpiFlavor, RdmaStack
from gpuforge.spec.model import NodeGroup, Role, SourceMode, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.nvidia_packages import UnsupportedDriver, cuda_major
from gpuforge.spec.platforms import UnsupportedPlatform, platform_for


def group_fabric(spec: Spec, group: str) -> Fabric | None:
    """The fabric section of the node group named ``group`` (None: it has none)."""
    return next((g.fabric for g in spec.node_groups if g.name == group), None)


def fabric_of(spec: Spec, node: Node) -> Fabric | None:
    return group_fabric(spec, node.group)


def nccl_cuda(spec: Spec, fabric: Fabric) -> str | None:
    """The CUDA release of the node group's NCCL and GDRCopy builds (``+cuda<x.y>``)."""
    return fabric.nccl_cuda or spec.versions.cuda_toolkit


def compute_fabrics(spec: Spec) -> list[Fabric]:
    """The fabrics of the groups that run jobs (compute role)."""
    return [g.fabric for g in spec.node_groups if g.fabric is not None and Role.COMPUTE in g.roles]


def pmix_default(spec: Spec) -> bool:
    """Slurm's ``MpiDefault=pmix``: a compute group has a fabric with OpenMPI (slurm-mpidefault)."""
    return any(f.mpi is MpiFlavor.OPENMPI for f in compute_fabrics(spec))


def propagate_except(spec: Spec) -> str | None:
    """slurm.conf's ``PropagateResourceLimitsExcept`` (None: not written, every limit propagates):
    ``slurm.propagate_resource_limits_except`` when set, else MEMLOCK where a compute group has an RDMA
    fabric (fabric_packages: slurm-memlock)."""
    if spec.slurm is None:
        return None
    chosen = spec.slurm.propagate_resource_limits_except
    if chosen is None:
        return "MEMLOCK" if compute_fabrics(spec) else None
    return ",".join(dict.fromkeys(limit.value for limit in chosen)) or None


def ipoib_address(spec: Spec, node: Node) -> str | None:
    """The node's IPoIB address with prefix (``address_start`` + its place in the group)."""
    fabric = fabric_of(spec, node)
    group = next(g for g in spec.node_groups if g.name == node.group)
    if fabric is None or fabric.ipoib is None:
        return None
    start = ipaddress.IPv4Interface(fabric.ipoib.address_start)
    return f"{start.ip + group.hostnames.index(node.name)}/{start.network.prefixlen}"


def fabric_warnings(spec: Spec) -> Iterator[SpecIssue]:
    """Combinations outside NVIDIA's documented support: reported by ``check``, not refused."""
    for i, group in enumerate(spec.node_groups):
        f = group.fabric
        if f is not None and f.peermem and f.stack is RdmaStack.DISTRO and group.hardware.gpu is not None:
            yield SpecIssue(
                ("node_groups", i, "fabric", "peermem"),
                "nvidia-peermem registers GPU memory through MLNX_OFED/DOCA-OFED's peer-memory interface "
                f"({table.SOURCES['peermem-needs-ofed'].where.split(' ; ')[0]}); the distribution kernel's RDMA "
                "core may not have it, and then loading it fails: set stack: doca, or peermem: false (GPUDirect "
                "RDMA through DMA-BUF, which NVIDIA recommends)",
            )


def fabric_rules(spec: Spec) -> Iterator[SpecIssue]:
    for i, group in enumerate(spec.node_groups):
        f = group.fabric
        if f is None:
            continue
        at = ("node_groups", i, "fabric")
        yield from _type_rules(f, at)
        yield from _doca_rules(spec, group, f, at)
        if group.hardware.gpu is not None:
            yield from _gpu_rules(spec, group, f, at)
            yield from _sharp_rules(spec, group, f, at)
        yield from _ipoib_rules(group, f, at)


def _type_rules(f: Fabric, at: tuple[str | int, ...]) -> Iterator[SpecIssue]:
    if f.type is FabricType.INFINIBAND:
        if f.soft_roce:
            yield SpecIssue((*at, "soft_roce"), "Soft-RoCE devices are RoCE: set type: roce, or remove soft_roce")
        if f.roce is not None:
            yield SpecIssue((*at, "roce"), "RoCE QoS settings need type: roce")
    elif f.ipoib is not None:
        yield SpecIssue((*at, "ipoib"), "IP over InfiniBand needs type: infiniband")
    if f.roce is not None and f.stack is not RdmaStack.DOCA:
        yield SpecIssue(
            (*at, "roce"),
            "RoCE QoS is set with NVIDIA's mlnx_qos (mlnx-tools), which DOCA-OFED brings and the distributions "
            "do not (Debian 12 has no mlnx-tools): set stack: doca, or configure QoS on the site's side",
        )


def _doca_rules(spec: Spec, group: NodeGroup, f: Fabric, at: tuple[str | int, ...]) -> Iterator[SpecIssue]:
    if f.stack is not RdmaStack.DOCA:
        if f.doca_version is not None:
            yield SpecIssue((*at, "doca_version"), "doca_version is for stack: doca; remove it, or set stack: doca")
        return
    if f.doca_version is None:
        yield SpecIssue((*at, "doca_version"), "stack: doca needs doca_version, the DOCA release to pin (e.g. 3.2.1)")
    os = group.os or spec.cluster.os
    distro = table.DOCA_DISTRO[os]
    if distro is None:
        yield SpecIssue(
            (*at, "stack"),
            f"no DOCA-OFED repository is known for {os.value} (DOCA publishes ubuntu22.04, ubuntu24.04 and rhel9 "
            "directories): use stack: distro",
        )
    elif distro == "rhel9" and f.doca_version is not None and table.release(f.doca_version) < table.DOCA_EL_MAJOR_FROM:
        yield SpecIssue(
            (*at, "doca_version"),
            f"DOCA {f.doca_version} has one directory per RHEL minor release; gpuforge uses DOCA's rhel9 directory, "
            "published from DOCA 3.2.0: pin 3.2.0 or newer",
        )
    if spec.sources.mode is not SourceMode.OFFLINE and f.doca_key_fingerprint is None:
        yield SpecIssue(
            (*at, "doca_key_fingerprint"),
            f"stack: doca needs the fingerprint of the key DOCA's repository is signed with ({table.DOCA_KEY_URL}, "
            "as 'gpg --show-keys' prints it): only its key ID A024F6F0E6D6A281 is published, and a key is used "
            "only once its full fingerprint is pinned",
        )


def _gpu_rules(spec: Spec, group: NodeGroup, f: Fabric, at: tuple[str | int, ...]) -> Iterator[SpecIssue]:
    cuda = nccl_cuda(spec, f)
    needs_cuda = [name for name, on in (("nccl", f.nccl is not None), ("gdrcopy", f.gdrcopy)) if on]
    if needs_cuda and cuda is None:
        yield SpecIssue(
            (*at, "nccl_cuda"),
            f"{' and '.join(needs_cuda)} need a CUDA release for their packages: set fabric.nccl_cuda (e.g. 13.0) "
            "or versions.cuda_toolkit",
        )
    drv = spec.versions.driver
    if needs_cuda and cuda is not None and drv is not None:
        try:
            major = cuda_major(int(drv.branch))
        except UnsupportedDriver:
            major = None
        if major is not None and int(cuda.split(".")[0]) > major:
            yield SpecIssue(
                (*at, "nccl_cuda"),
                f"CUDA {cuda} is newer than the CUDA {major} of driver branch {drv.branch}: NCCL and GDRCopy builds "
                f"for CUDA {cuda.split('.')[0]} do not run on it (e.g. nccl_cuda: 12.9)",
            )
    if f.nccl_tests:
        for missing, text in (
            (f.nccl is None, "nccl_tests builds against the pinned NCCL: set fabric.nccl"),
            (f.mpi is not MpiFlavor.OPENMPI, "nccl_tests builds with MPI=1: set mpi: openmpi"),
            (spec.versions.cuda_toolkit is None, "nccl_tests compiles with nvcc: set versions.cuda_toolkit"),
        ):
            if missing:
                yield SpecIssue((*at, "nccl_tests"), text)
    if f.gdrcopy:
        try:
            platform = platform_for(group.os or spec.cluster.os, group.arch)
        except UnsupportedPlatform:
            return
        if table.gdrcopy_files(platform, f.gdrcopy_version, cuda or "0.0") is None:
            yield SpecIssue(
                (*at, "gdrcopy"),
                f"no GDRCopy packages are known for {platform.os.value} (NVIDIA's redist directories cited are "
                "Ubuntu 22.04 and 24.04): set gdrcopy: false",
            )


def _sharp_rules(spec: Spec, group: NodeGroup, f: Fabric, at: tuple[str | int, ...]) -> Iterator[SpecIssue]:
    """What the NCCL-RDMA-SHARP plugin's source build needs (fabric_packages ``SHARP_PLUGIN_CITES``)."""
    if f.sharp_plugin is None:
        return
    os = group.os or spec.cluster.os
    for missing, text in (
        (
            f.type is not FabricType.INFINIBAND,
            "SHARP aggregates in InfiniBand (Quantum) switches: set type: infiniband",
        ),
        (
            f.stack is not RdmaStack.DOCA,
            "no distribution package ships the NCCL-RDMA-SHARP plugin or SHARP; gpuforge builds it from its "
            "release against DOCA-Host (NVIDIA's stated requirement): set stack: doca, or remove sharp_plugin",
        ),
        (not os.is_deb, f"the plugin's build dependencies are cited for Ubuntu only, not {os.value}"),
        (f.nccl is None, "the plugin is loaded by NCCL: set fabric.nccl"),
        (spec.versions.cuda_toolkit is None, "the plugin compiles against CUDA: set versions.cuda_toolkit"),
    ):
        if missing:
            yield SpecIssue((*at, "sharp_plugin"), text)


def _ipoib_rules(group: NodeGroup, f: Fabric, at: tuple[str | int, ...]) -> Iterator[SpecIssue]:
    if f.ipoib is None:
        return
    start = ipaddress.IPv4Interface(f.ipoib.address_start)
    last = start.ip + (len(group.hostnames) - 1) if int(start.ip) + len(group.hostnames) - 1 < 2**32 else None
    net = start.network
    if last is None or last not in net or (net.prefixlen < 31 and last == net.broadcast_address):
        yield SpecIssue(
            (*at, "ipoib", "address_start"),
            f"{len(group.hostnames)} nodes from {start.ip} do not fit in {net}",
        )

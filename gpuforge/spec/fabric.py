"""The GPU fabric of a node group: InfiniBand or RoCE, the RDMA stack, NCCL and MPI (``fabric:``).

Omit the section for a group without a fabric. With it, the ``fabric`` layer installs the RDMA stack
(the distribution's rdma-core, or NVIDIA's DOCA-OFED host packages), loads the RDMA kernel modules,
makes Soft-RoCE devices (labs, CI), loads ``nvidia-peermem`` on GPU nodes, installs GDRCopy, NCCL
(and builds nccl-tests) and OpenMPI with UCX and PMIx; ``gpuforge validate`` checks the HCAs, their
ports and firmware and moves traffic between nodes against ``thresholds``.

Cross-field rules (DOCA needs a pinned version and key, Soft-RoCE and RoCE QoS only with ``roce``,
IPoIB only with ``infiniband``, NCCL on the driver's CUDA major, ...) are in
``gpuforge.spec.fabric_rules``; the cited package and repository facts in
``gpuforge.spec.fabric_packages``.

Invariant: every name here is one plain token (letters, digits, ``_ . -``), so it lands unquoted in a
shell word, a systemd unit setting, an fstab or networkd line and a modules-load file alike.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, field_validator

from gpuforge.spec.citation import Citation
from gpuforge.spec.openpgp import Fingerprint
from gpuforge.spec.policy import live, rolling
from gpuforge.spec.strict import StrictModel

SOURCES: dict[str, Citation] = {
    "dev-valid-name": Citation(
        "Linux kernel net/core/dev.c, dev_valid_name()",
        "github.com/torvalds/linux net/core/dev.c",
        '\'if (strnlen(name, IFNAMSIZ) == IFNAMSIZ) return false; if (!strcmp(name, ".") || !strcmp(name, '
        "\"..\")) return false; ... if (*name == '/' || *name == ':' || isspace(*name)) return false' "
        "(IFNAMSIZ 16: 15 characters at most)",
    ),
    "rdma-link-add": Citation(
        "iproute2 rdma-link(8) (Debian 12 iproute2 6.1.0-3, man/man8/rdma-link.8)",
        "https://manpages.debian.org/bookworm/iproute2/rdma-link.8.en.html",
        "'rdma link add NAME type TYPE netdev NETDEV - add an rdma link for the specified type to the network "
        "device'; 'rdma link add rxe_eth0 type rxe netdev eth0: Adds a RXE link named rxe_eth0 to network "
        "device eth0'",
    ),
}

_NETDEV = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")
_RDMA_DEVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DOCA_VERSION = r"^\d+\.\d+\.\d+$"
NCCL_VERSION = r"^\d+\.\d+\.\d+-\d+$"
CUDA_RELEASE = r"^\d+\.\d+$"
FIRMWARE = r"^\d+\.\d+\.\d+$"
GDRCOPY_VERSION = r"^\d+\.\d+(\.\d+)?-\d+$"
NCCL_TESTS_VERSION = r"^\d+\.\d+\.\d+$"
SHARP_PLUGIN_VERSION = r"^\d+\.\d+\.\d+$"


def netdev_name(value: str) -> str:
    """A Linux network interface name (dev-valid-name: 15 characters at most, no '/', ':' or space),
    narrowed to letters, digits, '_', '.' and '-' and a letter or digit first."""
    if not _NETDEV.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a network interface name (15 characters at most: letters, digits, '_', '.', "
            "'-'; a letter or digit first)"
        )
    return value


def rdma_device_name(value: str) -> str:
    """An RDMA device name as /sys/class/infiniband lists it (``mlx5_0``, ``rxe_eth1``)."""
    if not _RDMA_DEVICE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an RDMA device name as /sys/class/infiniband lists them (letters, digits, '_', "
            "'.', '-'; 64 at most)"
        )
    return value


def ipv4_interface(value: str) -> str:
    """An IPv4 address with its prefix length (``10.20.0.11/16``), the host part not all zeros or ones."""
    if "/" not in value:
        raise ValueError(f"{value!r} needs its prefix length (e.g. 10.20.0.11/16)")
    iface = ipaddress.IPv4Interface(value)
    net = iface.network
    if net.prefixlen < 31 and iface.ip in (net.network_address, net.broadcast_address):
        raise ValueError(f"{value!r} is the network's or broadcast address, not a host's")
    return str(iface)


NetdevName = Annotated[str, AfterValidator(netdev_name)]
RdmaDeviceName = Annotated[str, AfterValidator(rdma_device_name)]
Ipv4Interface = Annotated[str, AfterValidator(ipv4_interface)]


class FabricType(StrEnum):
    INFINIBAND = "infiniband"
    ROCE = "roce"


class RdmaStack(StrEnum):
    DISTRO = "distro"
    DOCA = "doca"


class MpiFlavor(StrEnum):
    OPENMPI = "openmpi"
    NONE = "none"


class RoceTrust(StrEnum):
    PCP = "pcp"
    DSCP = "dscp"


class RoceQos(StrictModel):
    """RoCE lossless settings on each HCA's network interface, with NVIDIA's mlnx_qos (DOCA's mlnx-tools)."""

    trust: RoceTrust = rolling(RoceTrust.DSCP, "Priority trust mode: pcp (VLAN priority) or dscp (IP DSCP)")
    pfc: list[int] = rolling(
        default_factory=lambda: [3], description="Priorities (0-7) with priority flow control on; the others off"
    )
    ecn: bool = rolling(True, "ECN (DCQCN) on the PFC priorities, as notification and reaction point")

    @field_validator("pfc")
    @classmethod
    def _priorities(cls, v: list[int]) -> list[int]:
        bad = [p for p in v if not 0 <= p <= 7]
        if bad:
            raise ValueError(f"priorities are 0 to 7, not {bad}")
        if len(set(v)) != len(v):
            raise ValueError("a priority is listed more than once")
        return sorted(v)


class Ipoib(StrictModel):
    """IP over InfiniBand on one interface, by a systemd-networkd file."""

    interface: NetdevName = rolling(description="The IPoIB interface (e.g. ib0)")
    address_start: Ipv4Interface = rolling(
        description="Address and prefix of the group's first node (e.g. 10.20.0.11/16); the others follow in order"
    )


class FabricThresholds(StrictModel):
    """What ``gpuforge validate`` requires of the traffic between two nodes (none: only report it)."""

    write_bw_gbps: float | None = live(None, "Least ib_write_bw bandwidth, Gb/s", gt=0)
    read_lat_us: float | None = live(None, "Most ib_read_lat typical latency, microseconds", gt=0)
    nccl_busbw_gbps: float | None = live(None, "Least NCCL all_reduce_perf bus bandwidth, GB/s", gt=0)
    write_bw_seconds: int = live(
        5,
        "Seconds each pair's ib_write_bw runs (-D); perftest measures between margins of a quarter of it. "
        "With write_bw_iterations: how long that run may take",
        ge=4,
        le=600,
    )
    write_bw_iterations: int | None = live(
        None,
        "Run ib_write_bw for this many writes (-n) instead of for write_bw_seconds: every write is measured, "
        "none falls in a margin (a slow or uneven link); perftest takes 5 to 2^32",
        ge=5,
        le=4294967296,
    )


class Fabric(StrictModel):
    """The node group's RDMA fabric and the communication stack over it."""

    type: FabricType = rolling(description="infiniband or roce")
    stack: RdmaStack = rolling(
        RdmaStack.DISTRO,
        "RDMA stack: distro (the OS's rdma-core) or doca (NVIDIA's DOCA-OFED host packages, doca-ofed)",
    )
    doca_version: str | None = rolling(
        None, "DOCA release of the doca-ofed packages (e.g. 3.2.1); required with stack: doca", pattern=DOCA_VERSION
    )
    doca_key_fingerprint: Fingerprint | None = live(
        None,
        "Fingerprint of the key DOCA's repository is signed with (GPG-KEY-Mellanox.pub, as 'gpg --show-keys' "
        "prints it); required with stack: doca outside offline mode: gpuforge has no cited fingerprint of it",
    )
    hcas: Literal["all"] | list[RdmaDeviceName] = live(
        "all", "RDMA devices to use, as /sys/class/infiniband names them (mlx5_0, rxe_eth1), or all"
    )
    soft_roce: list[NetdevName] = rolling(
        default_factory=list,
        description="Network interfaces that get a Soft-RoCE device rxe_<interface> (rdma_rxe; labs and CI "
        "without an RDMA NIC); only with type: roce",
    )
    link_rate_gbps: int | None = live(None, "Expected port rate, Gb/s (checked by validate)", ge=1)
    firmware: str | None = live(None, "Expected HCA firmware (fw_ver, e.g. 28.39.1002; checked by validate)",
                                pattern=FIRMWARE)  # fmt: skip
    peermem: bool = rolling(True, "Load nvidia-peermem (GPUDirect RDMA) on the group's GPU nodes")
    gdrcopy: bool = rolling(False, "Install GDRCopy (gdrdrv kernel module, libgdrapi) on GPU nodes")
    gdrcopy_version: str = rolling(
        "2.6-1", "GDRCopy package version of NVIDIA's redist files (with gdrcopy: true)", pattern=GDRCOPY_VERSION
    )
    nccl: str | None = rolling(None, "NCCL version to pin on GPU nodes (libnccl2, e.g. 2.27.7-1)", pattern=NCCL_VERSION)
    nccl_cuda: str | None = rolling(
        None,
        "CUDA release of the NCCL build (the '+cuda<x.y>' of its package, e.g. 13.0); default: "
        "versions.cuda_toolkit; its major at most the driver's CUDA major (a newer driver runs older CUDA)",
        pattern=CUDA_RELEASE,
    )
    nccl_tests: bool = live(False, "Build nccl-tests on GPU nodes against that NCCL and MPI (MPI=1)")
    nccl_tests_version: str = live("2.19.6", "nccl-tests release built (with nccl_tests: true)",
                                   pattern=NCCL_TESTS_VERSION)  # fmt: skip
    sharp_plugin: str | None = rolling(
        None,
        "nccl-rdma-sharp-plugins release (its tag v<version>, e.g. 2.1.0) built on GPU nodes against CUDA and "
        "DOCA-OFED's SHARP, found by NCCL as libnccl-net.so; needs type: infiniband, stack: doca, nccl and "
        "versions.cuda_toolkit, and the archive's sha256 in sources.artifact_sha256",
        pattern=SHARP_PLUGIN_VERSION,
    )
    mpi: MpiFlavor = rolling(
        MpiFlavor.OPENMPI,
        "openmpi: OpenMPI with UCX and PMIx (Slurm MpiDefault=pmix when a compute group has it), or none",
    )
    roce: RoceQos | None = rolling(None, "RoCE QoS (trust, PFC, ECN) with mlnx_qos; only with type: roce")
    ipoib: Ipoib | None = rolling(None, "IP over InfiniBand addresses; only with type: infiniband")
    thresholds: FabricThresholds = live(
        default_factory=FabricThresholds, description="What validate's traffic tests must reach"
    )

    @field_validator("soft_roce")
    @classmethod
    def _unique_netdevs(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("an interface is listed more than once")
        return v

    @field_validator("hcas")
    @classmethod
    def _hcas(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and not v:
            raise ValueError("is empty; give RDMA device names or 'all'")
        if isinstance(v, list) and len(set(v)) != len(v):
            raise ValueError("a device is listed more than once")
        return v


def soft_roce_device(netdev: str) -> str:
    """The Soft-RoCE device made on ``netdev`` (rdma-link-add's own example: ``rxe_eth0`` on eth0)."""
    return f"rxe_{netdev}"

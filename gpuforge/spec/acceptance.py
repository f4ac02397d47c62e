"""The ``acceptance`` section: what ``gpuforge accept`` runs on every node, and how it judges.

A campaign runs as Slurm jobs (one per partition, or per leaf switch) with one task per node.
Each step has a duration or level and optional thresholds; every numeric result is also compared
with the node's peers (same group, same step): a node more than ``outliers.margin_percent`` below
the group median, and beyond ``outliers.mad_threshold`` robust deviations, is an outlier.

Defaults are in the field descriptions (``docs/spec-reference.md``; ``docs/acceptance.md``
explains each step). Every value here lands in a shell command of the batch script or a node
runner's argv: its type admits only what is one literal token there (``NodePath``,
``EnrootImage``, ``SizeToken``), and the renderer quotes it as well.

Cross-field rules (spares name real partitions and compute nodes, the fabric pair test needs a
node group with a fabric) are :mod:`gpuforge.spec.acceptance_rules`, run with the spec's other rules.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field

from gpuforge.spec import hostlist
from gpuforge.spec.policy import live
from gpuforge.spec.strict import Name, StrictModel
from gpuforge.spec.types import hostlist_expression

_NODE_PATH = re.compile(r"/[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")
_COMMAND = re.compile(r"[A-Za-z0-9._+-]{1,128}")
#: An enroot image URI as pyxis takes it (``[USER@][REGISTRY#]IMAGE[:TAG]``, NVIDIA/pyxis
#: pyxis_slurm.c ``spank_opts``): user, registry host[:port], image path, tag.
_ENROOT_IMAGE = re.compile(
    r"(?:[a-z_][a-z0-9_-]{0,31}@)?(?:[A-Za-z0-9.-]{1,253}(?::[0-9]{1,5})?#)?"
    r"[a-z0-9]+(?:[._/-][a-z0-9]+){0,32}(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
)
_SIZE = re.compile(r"[0-9]{1,12}[KMGkmg]?")
#: Kubernetes label and taint syntax (kubectl label / kubectl taint reference, gpuforge.acceptance.kube_actions
#: SOURCES): a name of at most 63 characters, letters, digits, '-', '_', '.', alphanumeric at both ends, with an
#: optional DNS subdomain prefix and '/' for a key; a value the same without prefix, or empty.
_K8S_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_K8S_KEY = re.compile(rf"(?:[a-z0-9](?:[a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_K8S_NAME}")
_K8S_VALUE = re.compile(rf"(?:{_K8S_NAME})?")
_TAINT = re.compile(rf"({_K8S_KEY.pattern})(?:=({_K8S_NAME}))?:(NoSchedule|PreferNoSchedule|NoExecute)")


def node_path(value: str) -> str:
    """An absolute path on a node: letters, digits, ``._+-`` and ``/`` only, no ``..`` component."""
    if len(value) > 1024 or not _NODE_PATH.fullmatch(value) or ".." in value.split("/"):
        raise ValueError(f"{value!r} is not an absolute node path (letters, digits, '._+-' and '/'; no '..')")
    return value


def tool_command(value: str) -> str:
    """A program: a name looked up on the node's PATH, or an absolute node path."""
    if value.startswith("/"):
        return node_path(value)
    if not _COMMAND.fullmatch(value) or value.startswith("-"):
        raise ValueError(f"{value!r} is neither a program name nor an absolute path")
    return value


def enroot_image(value: str) -> str:
    """A container image as pyxis' ``--container-image`` takes it (``[USER@][REGISTRY#]IMAGE[:TAG]``)."""
    if len(value) > 512 or not _ENROOT_IMAGE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an enroot image URI ([USER@][REGISTRY#]IMAGE[:TAG], e.g. nvcr.io#nvidia/cuda:12.4.1)"
        )
    return value


def size_token(value: str) -> str:
    """A byte count with an optional K/M/G suffix (``8``, ``4k``, ``8G``), as fio and nccl-tests take it."""
    if not _SIZE.fullmatch(value):
        raise ValueError(f"{value!r} is not a size (digits and an optional K, M or G)")
    return value


def label_key(value: str) -> str:
    """A Kubernetes label key: ``[prefix/]name`` (name: 63 characters at most, alphanumeric at both ends)."""
    if len(value) > 317 or not _K8S_KEY.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes label key ([dns-subdomain/]name, e.g. gpuforge.dev/pool)")
    return value


def label_value(value: str) -> str:
    """A Kubernetes label value: empty, or 63 characters at most, alphanumeric at both ends."""
    if not _K8S_VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes label value (letters, digits, '-_.', 63 at most)")
    return value


def taint(value: str) -> str:
    """A node taint as kubectl taint writes it: ``key[=value]:NoSchedule|PreferNoSchedule|NoExecute``."""
    if len(value) > 400 or not _TAINT.fullmatch(value):
        raise ValueError(f"{value!r} is not a taint (key[=value]:NoSchedule|PreferNoSchedule|NoExecute)")
    return value


NodePath = Annotated[str, AfterValidator(node_path)]
LabelKey = Annotated[str, AfterValidator(label_key)]
LabelValue = Annotated[str, AfterValidator(label_value)]
Taint = Annotated[str, AfterValidator(taint)]
ToolCommand = Annotated[str, AfterValidator(tool_command)]
EnrootImage = Annotated[str, AfterValidator(enroot_image)]
SizeToken = Annotated[str, AfterValidator(size_token)]
Seconds = Annotated[int, Field(ge=1, le=7 * 86400)]


class GroupBy(StrEnum):
    PARTITION = "partition"
    LEAF_SWITCH = "leaf_switch"


class FioPattern(StrEnum):
    READ = "read"
    WRITE = "write"
    RANDREAD = "randread"
    RANDWRITE = "randwrite"
    RANDRW = "randrw"


class HealthStep(StrictModel):
    """The node's own checks (``gpuforge-health``, installed by the health layer) inside the job."""

    enabled: bool = live(True, "Run /usr/local/sbin/gpuforge-health --json --no-slurm in the job (default on)")


class CpuStep(StrictModel):
    """CPU burn-in: ``stress-ng --cpu N --timeout S --metrics-brief``; metric: bogo ops/s (real time)."""

    enabled: bool = live(True, "Run the CPU burn-in (default on)")
    seconds: Seconds = live(60, "How long stress-ng runs (default 60)")
    workers: int = live(0, "stress-ng workers; 0: one per CPU (stress-ng's own rule; default 0)", ge=0, le=4096)
    min_bogo_ops_per_s: float | None = live(None, "Fail a node below this many bogo ops/s (default: none)", ge=0)


class MemoryStep(StrictModel):
    """Memory burn-in: ``stress-ng --vm N --vm-bytes P% --timeout S --metrics-brief``."""

    enabled: bool = live(True, "Run the memory burn-in (default on)")
    seconds: Seconds = live(60, "How long stress-ng runs (default 60)")
    workers: int = live(1, "stress-ng vm workers (default 1)", ge=1, le=4096)
    percent: int = live(50, "Memory each worker maps, in percent of available memory (default 50)", ge=1, le=95)
    min_bogo_ops_per_s: float | None = live(None, "Fail a node below this many bogo ops/s (default: none)", ge=0)


class DiskStep(StrictModel):
    """Local disk: ``fio --output-format=json`` on a file in ``directory``; metrics: read/write IOPS and MiB/s."""

    enabled: bool = live(False, "Run fio (default off: fio must be on the nodes)")
    directory: NodePath = live("/var/tmp", "Directory on the disk under test (default /var/tmp)")
    size: SizeToken = live("1G", "Test file size (default 1G)")
    seconds: Seconds = live(30, "Run time (default 30)")
    pattern: FioPattern = live(FioPattern.RANDRW, "fio --rw (default randrw)")
    block_size: SizeToken = live("4k", "fio --bs (default 4k)")
    iodepth: int = live(32, "fio --iodepth with libaio (default 32)", ge=1, le=4096)
    direct: bool = live(True, "O_DIRECT (default on; off where the file system has none, e.g. tmpfs)")
    min_read_iops: float | None = live(None, "Fail a node below this read IOPS (default: none)", ge=0)
    min_write_iops: float | None = live(None, "Fail a node below this write IOPS (default: none)", ge=0)


class ContainerStep(StrictModel):
    """Pull and run an image through pyxis on every node: ``srun --container-image=IMAGE``."""

    enabled: bool = live(True, "Run it where slurm.containers.pyxis is on (default on; skipped otherwise)")
    image: EnrootImage = live("ubuntu:24.04", "Image as pyxis takes it (default ubuntu:24.04)")
    seconds: Seconds = live(900, "Time allowed for the pull and run (default 900)")


class DcgmStep(StrictModel):
    """GPU diagnostics: ``dcgmi diag -r LEVEL -j`` (level 3 includes targeted stress and power)."""

    enabled: bool = live(True, "Run it on GPU nodes (default on)")
    level: int = live(3, "dcgmi diag run level, 3 or 4 (default 3)", ge=3, le=4)
    seconds: Seconds = live(3600, "Time allowed (default 3600)")


class NcclStep(StrictModel):
    """nccl-tests ``all_reduce_perf -b MIN -e MAX -f 2``: within a node (``-g <GPUs>``) and across a leaf."""

    enabled: bool = live(True, "Run it on GPU nodes (default on)")
    command: ToolCommand = live("all_reduce_perf", "The all_reduce_perf program (default: from PATH)")
    min_bytes: SizeToken = live("8", "-b (default 8)")
    max_bytes: SizeToken = live("8G", "-e (default 8G)")
    seconds: Seconds = live(1800, "Time allowed (default 1800)")
    min_busbw_gbps: float | None = live(
        None, "Fail below this bus bandwidth at the largest size, GB/s (default: none)", ge=0
    )
    across_leaf: bool = live(True, "Also one run across the nodes of each leaf switch (srun --mpi=pmix; default on)")
    mpi: Name = live("pmix", "srun --mpi plugin for the leaf run (default pmix)")


class FabricStep(StrictModel):
    """The fabric pair test after the jobs: ``gpuforge validate --checks fabric.pairs`` on the tested nodes
    (perftest, and NCCL on GPU nodes, between pairs of nodes within each leaf switch)."""

    enabled: bool = live(False, "Run the fabric pair test (needs a node group with a fabric; default off)")


class Steps(StrictModel):
    """The steps of a campaign, in the order they run on each node."""

    health: HealthStep = live(default_factory=HealthStep, description="gpuforge-health in the job")
    cpu: CpuStep = live(default_factory=CpuStep, description="CPU burn-in (stress-ng)")
    memory: MemoryStep = live(default_factory=MemoryStep, description="Memory burn-in (stress-ng)")
    disk: DiskStep = live(default_factory=DiskStep, description="Local disk (fio)")
    container: ContainerStep = live(default_factory=ContainerStep, description="Container pull and run (pyxis)")
    dcgm: DcgmStep = live(default_factory=DcgmStep, description="DCGM diagnostics")
    nccl: NcclStep = live(default_factory=NcclStep, description="NCCL all_reduce_perf")
    fabric: FabricStep = live(default_factory=FabricStep, description="Fabric pair test (validate's fabric.pairs)")


class Outliers(StrictModel):
    """Peer comparison: a node is an outlier below ``median x (1 - margin)`` and beyond the MAD threshold."""

    margin_percent: float = live(10.0, "How far below the group median, in percent (default 10)", gt=0, lt=100)
    mad_threshold: float = live(3.0, "Robust deviations (|x - median| / (1.4826 MAD)) beyond which (default 3)", gt=0)
    min_group: int = live(3, "Fewest nodes with a figure to compare (default 3)", ge=2)


class SparePool(StrictModel):
    """Healthy spares that stand in for failed nodes of one partition (Kubernetes: of one node group)."""

    partition: Name = live(
        description="The partition the spares stand in for (Kubernetes: the node_groups entry whose nodes they do)"
    )
    nodes: Annotated[str, AfterValidator(hostlist_expression)] = live(
        description="Hostlist of the spare nodes (compute nodes outside that partition)"
    )
    size: int = live(description="The partition's size in service: below it, a spare moves in", ge=1)
    labels: dict[LabelKey, LabelValue] = live(
        default_factory=dict,
        description="Kubernetes: the labels that make a node a member of the group (set on a spare that moves in; "
        "required there, unused on Slurm)",
    )
    spare_taints: list[Taint] = live(
        default_factory=list,
        description="Kubernetes: taints a spare carries while in the pool (key[=value]:Effect), removed when it "
        "moves in",
    )

    @property
    def hostnames(self) -> list[str]:
        return hostlist.expand(self.nodes)


class KubeAcceptance(StrictModel):
    """Where a Kubernetes campaign's Jobs run and how long Kubernetes keeps them."""

    namespace: str = live(
        "default", "Namespace of the Jobs (default: default)", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
    )
    ttl_seconds_after_finished: int = live(
        3600,
        "Job spec.ttlSecondsAfterFinished: Kubernetes deletes a finished Job (and its pod) this long after; "
        "gpuforge deletes them itself once their logs are read (default 3600)",
        ge=0,
        le=7 * 86400,
    )


class Acceptance(StrictModel):
    """Acceptance campaigns (``gpuforge accept``): burn-in, performance outliers, hot spares."""

    group_by: GroupBy = live(GroupBy.PARTITION, "One job per partition (default) or per leaf switch")
    time_limit_minutes: int = live(0, "Each job's time limit; 0: the steps' durations plus 10 minutes", ge=0, le=10080)
    start_timeout_s: Seconds = live(900, "How long a job may wait to start before it is cancelled (default 900)")
    steps: Steps = live(default_factory=Steps, description="The steps and their settings")
    outliers: Outliers = live(default_factory=Outliers, description="Peer comparison")
    spares: list[SparePool] = live(default_factory=list, description="Hot spares per partition")
    drain_failed: bool = live(
        True, "Drain a node that fails a step, with the step's reason (Kubernetes: cordon and taint; default on)"
    )
    kubernetes: KubeAcceptance = live(
        default_factory=KubeAcceptance, description="Kubernetes campaigns: the Jobs' namespace and lifetime"
    )

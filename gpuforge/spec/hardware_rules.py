"""Node hardware: refusals (a slurmd node without its figures) and warnings (figures implausible for
the GPU model), and the one rule that turns a node's memory into Slurm's RealMemory.

Invariants:

* A Slurm compute group (the nodes that run slurmd and get a ``NodeName=`` line) states sockets,
  cores per socket, threads per core and memory, or says ``discover: true``; otherwise the spec is
  refused, naming each missing field. Groups that run no slurmd need no figures.
* Warnings never refuse: a GPU count above the model's cited ``max_per_node``, memory below the
  GPUs' own memory, a ``discover: true`` group not discovered yet.
* :func:`slurm_real_memory` is at most the memory slurmd reports, so a discovered node is never
  set INVALID for "Low RealMemory" (:data:`SOURCES`).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec.citation import Citation
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.model import NodeGroup, Role, Spec

#: Percent of a node's memory (as slurmd -C reports it) left out of RealMemory.
REAL_MEMORY_MARGIN_PERCENT = 2

#: What Slurm says about RealMemory and a node that registers with less than it.
SOURCES: dict[str, Citation] = {
    "real-memory": Citation(
        "slurm.conf(5), NODE CONFIGURATION",
        "github.com/SchedMD/slurm doc/man/man5/slurm.conf.5 (284c3b95f08a)",
        "RealMemory: 'Size of real memory on the node in mebibytes (e.g. \"2048\").'; 'Nodes which register "
        "to the system with less than the configured resources (e.g. too little memory), will be placed in "
        'the "DOWN" state to avoid scheduling jobs on them. ... The resources checked at node registration '
        "time are: CPUs, RealMemory and TmpDisk.'",
    ),
    "node-reg-mem-percent": Citation(
        "slurm.conf(5), SchedulerParameters node_reg_mem_percent; src/slurmctld/node_mgr.c",
        "github.com/SchedMD/slurm doc/man/man5/slurm.conf.5, src/slurmctld/node_mgr.c (284c3b95f08a)",
        "'Percentage of memory a node is allowed to register with without being marked as invalid with low "
        "memory. Default is 100.'; node_mgr.c: 'Low RealMemory (reported:%...)' when reported/configured*100 "
        "< node_reg_mem_percent",
    ),
    "slurmd-memory": Citation(
        "slurmd get_memory()",
        "github.com/SchedMD/slurm src/slurmd/slurmd/get_mach_stat.c (284c3b95f08a)",
        "'get_memory - Return the size of physical memory in MB on this system': sysconf(_SC_PHYS_PAGES) * "
        "sysconf(_SC_PAGE_SIZE) / 1048576.0 (on Linux _SC_PHYS_PAGES is MemTotal)",
    ),
}

DISCOVER_FIRST = "run gpuforge discover SPEC first"
FIGURE_NAMES = {
    "sockets": "sockets",
    "cores_per_socket": "cores per socket",
    "threads_per_core": "threads per core",
    "real_memory_mb": "memory in MiB (RealMemory)",
}


def slurm_real_memory(reported_mb: int) -> int:
    """RealMemory for a node whose slurmd reports ``reported_mb`` MiB: that less
    :data:`REAL_MEMORY_MARGIN_PERCENT` percent, rounded down (MemTotal moves by a few MiB between
    kernels and firmware; configured above reported is a node Slurm will not schedule on)."""
    return reported_mb * (100 - REAL_MEMORY_MARGIN_PERCENT) // 100


def runs_slurmd(spec: Spec, group: NodeGroup) -> bool:
    """The group's nodes run slurmd and get a NodeName line (Slurm compute nodes)."""
    return spec.slurm is not None and Role.COMPUTE in group.roles


def hardware_issues(spec: Spec) -> Iterator[SpecIssue]:
    """Each figure a slurmd group lacks, named by its field (refused: a default would be a lie)."""
    for gi, group in enumerate(spec.node_groups):
        hw = group.hardware
        if not runs_slurmd(spec, group) or hw.discover or not hw.missing_figures:
            continue
        for name in hw.missing_figures:
            yield SpecIssue(
                ("node_groups", gi, "hardware", name),
                f"{group.name} runs slurmd: give its nodes' {FIGURE_NAMES[name]} (as slurmd -C reports "
                "them), or set hardware.discover: true and run gpuforge discover SPEC",
            )


def unknown_hardware(spec: Spec) -> list[str]:
    """Slurm compute groups whose figures are still unknown (``discover: true``, not discovered)."""
    return [g.name for g in spec.node_groups if runs_slurmd(spec, g) and g.hardware.missing_figures]


def hardware_warnings(spec: Spec) -> list[SpecIssue]:
    """Figures that are implausible for the GPU model, and groups not discovered yet."""
    return [w for gi, group in enumerate(spec.node_groups) for w in _group_warnings(spec, gi, group)]


def _group_warnings(spec: Spec, gi: int, group: NodeGroup) -> Iterator[SpecIssue]:
    hw, where = group.hardware, ("node_groups", gi, "hardware")
    if hw.discover and runs_slurmd(spec, group) and hw.missing_figures:
        yield SpecIssue(where, f"{group.name}: discover: true and no figures discovered yet: {DISCOVER_FIRST}")
    if hw.gpu is None:
        return
    model = GPU_MODELS[hw.gpu.model]
    if model.max_per_node is not None and hw.gpu.count > model.max_per_node:
        yield SpecIssue(
            (*where, "gpu", "count"),
            f"{hw.gpu.count} x {model.name} in one node: NVIDIA's largest {model.name} node has "
            f"{model.max_per_node} (a typo?)",
        )
    floor = hw.gpu.count * model.memory_gb * 1000
    if "real_memory_mb" in hw.model_fields_set and hw.real_memory_mb < floor:
        yield SpecIssue(
            (*where, "real_memory_mb"),
            f"{hw.real_memory_mb} MiB for {hw.gpu.count} x {model.name} ({model.memory_gb} GB each): less "
            f"host memory than GPU memory ({floor} MB) cannot stage or pin the GPUs' data (MiB, not GB?)",
        )

"""Rules that relate spec fields to each other.

Each rule is a small function ``(spec) -> iterable of SpecIssue``; ``check_rules`` runs
all of them so that a user sees every problem of a file at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping

from gpuforge.spec import (
    hostlist,
    k8s_rules,
    k8s_upstream,
    nvidia_packages,
    slurm_gpu,
    slurm_releases,
    storage_rules,
)
from gpuforge.spec.acceptance_rules import acceptance_rules
from gpuforge.spec.bmc_rules import bmc_rules
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.fabric_rules import fabric_rules
from gpuforge.spec.gpus import GPU_MODELS, MEMORY_SLICES, GpuModel
from gpuforge.spec.hardware_rules import hardware_issues
from gpuforge.spec.k8s_model import operator_dcgm_exporter
from gpuforge.spec.mig import mig_layout
from gpuforge.spec.model import (
    K8S_ROLES,
    SCHEDULER_ROLES,
    SLURM_ROLES,
    Account,
    Connector,
    ContainerEngine,
    DriverFlavor,
    DriverSource,
    MigDevices,
    MigStrategy,
    NodeGroup,
    PreemptMode,
    Role,
    Scheduler,
    SourceMode,
    Spec,
)
from gpuforge.spec.network_operator_rules import network_operator_rules
from gpuforge.spec.nodes import address_range_problem, group_addresses, resolve_nodes
from gpuforge.spec.platforms import Arch, UnsupportedPlatform, platform_for
from gpuforge.spec.provisioning_rules import provisioning_rules
from gpuforge.spec.slurm_build_rules import slurm_build_rules
from gpuforge.spec.slurm_mix_rules import slurm_release_rules
from gpuforge.spec.slurm_model import ProcessTracking
from gpuforge.spec.slurm_packages import CGROUP_V2_SINCE, SlurmSource
from gpuforge.spec.slurm_parameters import slurm_parameter_rules
from gpuforge.spec.types import k8s_name

Rule = Callable[[Spec], Iterable[SpecIssue]]
RULES: list[Rule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def _dupes(items: Iterable[str]) -> list[str]:
    return sorted(k for k, v in Counter(items).items() if v > 1)


def _cycles(parent_of: Mapping[str, str]) -> dict[str, tuple[list[str], int]]:
    """Each name on a cycle of ``parent_of`` (child -> parent): that cycle in parent order, and
    where the name is in it.

    Linear time: every name is walked once (a walk stops at a name an earlier walk finished), so a
    chain of thousands of accounts or switches costs thousands of steps, not millions.
    """
    finished: set[str] = set()
    cycles: dict[str, tuple[list[str], int]] = {}
    for start in parent_of:
        walk: list[str] = []
        on_walk: set[str] = set()
        name = start
        while name in parent_of and name not in finished and name not in on_walk:
            walk.append(name)
            on_walk.add(name)
            name = parent_of[name]
        if name in on_walk:
            cycle = walk[walk.index(name) :]
            cycles.update((member, (cycle, at)) for at, member in enumerate(cycle))
        finished.update(walk)
    return cycles


def _cycle_text(cycle: list[str], at: int, shown: int = 6) -> str:
    """``a -> b -> c -> a`` from ``cycle[at]``; a long cycle shows its first names and its length."""
    name = cycle[at]
    if len(cycle) > shown:
        first = [cycle[(at + i) % len(cycle)] for i in range(shown)]
        return " -> ".join([*first, f"... ({len(cycle):,} in the cycle)", name])
    return " -> ".join([*cycle[at:], *cycle[:at], name])


@rule
def unique_names_and_addresses(spec: Spec) -> Iterator[SpecIssue]:
    first: dict[str, int] = {}
    second: dict[str, int] = {}
    for gi, group in enumerate(spec.node_groups):
        if first.setdefault(group.name, gi) != gi:
            second.setdefault(group.name, gi)
    for name in sorted(second):
        yield SpecIssue(("node_groups", second[name], "name"), f"group name {name!r} is used by more than one group")
    seen: dict[str, int] = {}
    for gi, group in enumerate(spec.node_groups):
        if group.addresses is not None and len(group.addresses) != len(group.hostnames):
            yield SpecIssue(
                ("node_groups", gi, "addresses"),
                f"{len(group.addresses)} address(es) for {len(group.hostnames)} host(s) in {group.hosts!r}; "
                "give one per host, or use address_start",
            )
        if group.addresses is not None and group.address_start is not None:
            yield SpecIssue(("node_groups", gi, "address_start"), "give either addresses or address_start, not both")
        if group.connector is Connector.VAGRANT and (group.addresses or group.address_start):
            yield SpecIssue(
                ("node_groups", gi, "connector"),
                "vagrant nodes take their addresses from 'vagrant ssh-config'; remove addresses/address_start",
            )
        for name in group.hostnames:
            if name in seen and seen[name] != gi:
                yield SpecIssue(
                    ("node_groups", gi, "hosts"),
                    f"host {name} is also in node_groups[{seen[name]}]; a node belongs to one group",
                    node=name,
                )
            seen.setdefault(name, gi)
    owners: dict[str, str] = {}
    for gi, group in enumerate(spec.node_groups):
        if group.addresses is not None and len(group.addresses) != len(group.hostnames):
            continue
        for name, addr in zip(group.hostnames, group_addresses(group), strict=True):
            if addr is None:
                continue
            if addr in owners:
                yield SpecIssue(
                    ("node_groups", gi, "addresses" if group.addresses else "address_start"),
                    f"address {addr} of {name} is already used by {owners[addr]}",
                    node=name,
                )
            owners.setdefault(addr, name)
        problem = address_range_problem(group.address_start, len(group.hostnames))
        if problem:
            yield SpecIssue(("node_groups", gi, "address_start"), problem)


def no_mig_message(model: str, group: str) -> str:
    """The refusal of a MIG layout on a GPU without MIG: that first, then the fix and the GPUs that have it."""
    mig_models = ", ".join(name for name, m in GPU_MODELS.items() if m.supports_mig)
    return f"{model} does not support MIG: drop mig_config from group {group!r} (GPUs with MIG: {mig_models})"


def _role_nodes(spec: Spec, role: Role) -> list[str]:
    return [name for g in spec.node_groups if role in g.roles for name in g.hostnames]


@rule
def scheduler_sections_and_roles(spec: Spec) -> Iterator[SpecIssue]:
    sched = spec.cluster.scheduler
    if sched is Scheduler.SLURM:
        if spec.slurm is None:
            yield SpecIssue(("slurm",), "cluster.scheduler is slurm, so a slurm section is required")
        if spec.kubernetes is not None:
            yield SpecIssue(("kubernetes",), "only allowed with cluster.scheduler: kubernetes (it is slurm)")
        wrong = K8S_ROLES
        ctl = _role_nodes(spec, Role.CONTROLLER)
        if len(ctl) not in (1, 2):
            yield SpecIssue(
                ("node_groups",),
                f"a Slurm cluster needs exactly one controller (two for HA); found {len(ctl)}"
                + (f": {hostlist.compress(ctl)}" if ctl else ""),
            )
        if not _role_nodes(spec, Role.COMPUTE):
            yield SpecIssue(("node_groups",), "no node has role compute")
    else:
        if spec.kubernetes is None:
            yield SpecIssue(("kubernetes",), "cluster.scheduler is kubernetes, so a kubernetes section is required")
        if spec.slurm is not None:
            yield SpecIssue(("slurm",), "only allowed with cluster.scheduler: slurm (it is kubernetes)")
        wrong = SLURM_ROLES
        if not _role_nodes(spec, Role.K8S_CONTROL_PLANE):
            yield SpecIssue(("node_groups",), "a Kubernetes cluster needs at least one k8s-control-plane node")
    for gi, group in enumerate(spec.node_groups):
        bad = sorted(r.value for r in group.roles if r in wrong)
        if bad:
            yield SpecIssue(
                ("node_groups", gi, "roles"),
                f"role(s) {', '.join(bad)} do not fit scheduler {sched.value}; its roles: "
                f"{', '.join(r.value for r in SCHEDULER_ROLES[sched])}",
            )
    if spec.monitoring.prometheus and not _role_nodes(spec, Role.MONITORING):
        yield SpecIssue(
            ("monitoring", "prometheus"),
            "Prometheus is on but no node has role monitoring; add the role or set prometheus: false",
        )


def _partition_nodes(
    groups: dict[str, list[str]], known: set[str], selector: str, loc: tuple[str | int, ...]
) -> Iterator[SpecIssue | str]:
    """The nodes ``selector`` names (group names and hostlists), or the problems of its parts."""
    try:
        parts = hostlist.split_top_level(selector)
    except hostlist.HostlistError as e:
        yield SpecIssue(loc, str(e))
        return
    for part in parts:
        if part in groups:
            yield from groups[part]
            continue
        try:
            names = hostlist.expand(part)
        except hostlist.HostlistError as e:
            yield SpecIssue(loc, str(e))
            continue
        missing = [n for n in names if n not in known]
        if missing:
            yield SpecIssue(
                loc,
                f"{hostlist.compress(missing)} is not a node or node group of this spec (groups: {', '.join(groups)})",
            )
        yield from (n for n in names if n in known)


def _account_rules(accounts: list[Account], qos_names: set[str], account_names: set[str]) -> Iterator[SpecIssue]:
    """Accounts: unique, parents defined and no account its own ancestor (linear in the accounts),
    QOS defined."""
    for name in _dupes(a.name for a in accounts):
        yield SpecIssue(("slurm", "accounts"), f"account {name!r} is defined more than once")
    in_cycle = _cycles({a.name: a.parent for a in accounts})
    for ai, account in enumerate(accounts):
        if account.name in in_cycle:
            chain = _cycle_text(*in_cycle[account.name])
            yield SpecIssue(
                ("slurm", "accounts", ai, "parent"), f"account {account.name!r} is its own ancestor ({chain})"
            )
        if account.parent not in account_names:
            yield SpecIssue(("slurm", "accounts", ai, "parent"), f"parent account {account.parent!r} is not defined")
        for qos_name in account.qos:
            if qos_name not in qos_names:
                yield SpecIssue(("slurm", "accounts", ai, "qos"), f"QOS {qos_name!r} is not defined in slurm.qos")
        if account.default_qos and account.default_qos not in (account.qos or ["normal"]):
            yield SpecIssue(
                ("slurm", "accounts", ai, "default_qos"),
                f"default QOS {account.default_qos!r} must be one of the account's qos: {account.qos or ['normal']}",
            )


@rule
def slurm_rules(spec: Spec) -> Iterator[SpecIssue]:
    s = spec.slurm
    if s is None or spec.cluster.scheduler is not Scheduler.SLURM:
        return  # a section for the other scheduler is reported once, by scheduler_sections_and_roles
    compute = set(_role_nodes(spec, Role.COMPUTE))
    for name in _dupes(p.name for p in s.partitions):
        yield SpecIssue(("slurm", "partitions"), f"partition {name!r} is defined more than once")
    defaults = [p.name for p in s.partitions if p.default]
    if len(defaults) > 1:
        yield SpecIssue(("slurm", "partitions"), f"only one partition may be default; found {', '.join(defaults)}")
    qos_names = {q.name for q in s.qos} | {"normal"}
    account_names = {a.name for a in s.accounts} | {"root"}
    groups = {g.name: g.hostnames for g in spec.node_groups}
    known = {n for names in groups.values() for n in names}
    for pi, part in enumerate(s.partitions):
        loc = ("slurm", "partitions", pi, "nodes")
        names: list[str] = []
        for item in _partition_nodes(groups, known, part.nodes, loc):
            if isinstance(item, SpecIssue):
                yield item
            else:
                names.append(item)
        not_compute = [n for n in names if n not in compute]
        if not_compute:
            yield SpecIssue(
                loc, f"{hostlist.compress(not_compute)} in partition {part.name!r} do(es) not have role compute"
            )
        if part.qos and part.qos not in qos_names:
            yield SpecIssue(("slurm", "partitions", pi, "qos"), f"QOS {part.qos!r} is not defined in slurm.qos")
        for acct in part.allow_accounts or []:
            if acct not in account_names:
                yield SpecIssue(
                    ("slurm", "partitions", pi, "allow_accounts"), f"account {acct!r} is not in slurm.accounts"
                )
    for name in _dupes(q.name for q in s.qos):
        yield SpecIssue(("slurm", "qos"), f"QOS {name!r} is defined more than once")
    for qi, q in enumerate(s.qos):
        for target in q.preempt:
            if target not in qos_names:
                yield SpecIssue(("slurm", "qos", qi, "preempt"), f"QOS {target!r} is not defined in slurm.qos")
            if target == q.name:
                yield SpecIssue(("slurm", "qos", qi, "preempt"), "a QOS cannot preempt itself")
        if q.preempt and s.preempt_mode is PreemptMode.OFF:
            yield SpecIssue(
                ("slurm", "qos", qi, "preempt"),
                "QOS preemption is set but slurm.preempt_mode is off; use requeue, cancel or suspend",
            )
    yield from _account_rules(s.accounts, qos_names, account_names)
    db_nodes = _role_nodes(spec, Role.ACCOUNTING_DB)
    if s.accounting.enabled and len(db_nodes) != 1:
        yield SpecIssue(
            ("slurm", "accounting", "enabled"),
            f"accounting needs exactly one node with role accounting-db; found {len(db_nodes)}"
            + (
                f": {hostlist.compress(db_nodes)}"
                if db_nodes
                else ": give one node that role, or turn accounting off: slurm: {accounting: {enabled: false}}"
            ),
        )
    if not s.accounting.enabled:
        if db_nodes:
            yield SpecIssue(
                ("slurm", "accounting", "enabled"),
                "accounting is off but a node has role accounting-db",
            )
        if s.qos or s.accounts:
            yield SpecIssue(
                ("slurm", "accounting", "enabled"),
                "QOS and accounts need accounting (slurmdbd); enable it or remove slurm.qos/accounts",
            )
    if s.mps.enabled and not any(g.hardware.gpu for g in spec.node_groups):
        yield SpecIssue(("slurm", "mps", "enabled"), "MPS GRES needs GPU nodes; no node group has GPUs")


@rule
def distro_slurm_cgroup(spec: Spec) -> Iterator[SpecIssue]:
    """The distribution's Slurm older than 22.05 (cgroup v1 only) on a platform that mounts only cgroup
    v2 (Ubuntu 22.04's 21.08.5): slurmd's proctrack/cgroup and task/cgroup would start no job."""
    s = spec.slurm
    if s is None or s.source is not SlurmSource.DISTRO or s.process_tracking is ProcessTracking.LINUXPROC:
        return
    for group in spec.node_groups:
        os_family = group.os or spec.cluster.os
        row = slurm_gpu.nvml_plugin(os_family)
        distro = row.archive_slurm if row is not None else None
        if not (set(group.roles) & SLURM_ROLES) or distro is None or not os_family.distribution.cgroup_v2_only:
            continue
        if slurm_releases.major_of(distro) < CGROUP_V2_SINCE:
            yield SpecIssue(
                ("slurm", "source"),
                f"node group {group.name!r} ({os_family.distribution.title}): the distribution's Slurm is "
                f"{slurm_releases.upstream_of(distro)}, whose cgroup plugin drives cgroup v1 only (cgroup v2 came in "
                f"Slurm {CGROUP_V2_SINCE}), and {os_family.distribution.title} mounts only cgroup v2: "
                "proctrack/cgroup and task/cgroup would start no job. Set slurm.source: site (SchedMD's "
                "slurm-smd packages from a repository the site runs) with versions.slurm 22.05 or later, or "
                "slurm.source: build (gpuforge builds SchedMD's release tarball)",
            )


@rule
def slurm_gpu_rules(spec: Spec) -> Iterator[SpecIssue]:
    """MIG slices are bound to jobs through NVML only (``slurm_gpu``)."""
    if spec.slurm is None:
        return
    for gi, group in enumerate(spec.node_groups):
        if group.hardware.gpu is None or Role.COMPUTE not in group.roles or not group.mig_config:
            continue
        if not GPU_MODELS[group.hardware.gpu.model].supports_mig:
            continue  # mig_rules: the GPU has no MIG at all, which is what to fix first
        if not slurm_gpu.uses_nvml(spec, group):
            yield SpecIssue(
                ("node_groups", gi, "mig_config"),
                f"Slurm binds MIG slices to jobs only through AutoDetect=nvml (their /dev/nvidia-caps files follow "
                f"instance IDs the node hands out), and {slurm_gpu.nvml_missing_reason(group.os or spec.cluster.os)}"
                ": set slurm.gpu_autodetect: nvml where the site's Slurm packages carry a plugin that installs, or "
                "drop mig_config",
            )


@rule
def gpu_driver_rules(spec: Spec) -> Iterator[SpecIssue]:
    has_gpu = any(g.hardware.gpu for g in spec.node_groups)
    drv = spec.versions.driver
    for gi, group in enumerate(spec.node_groups):
        if group.hardware.nvswitch and not group.hardware.gpu:
            yield SpecIssue(("node_groups", gi, "hardware", "nvswitch"), "NVSwitch without GPUs: set hardware.gpu")
    if has_gpu and drv is None:
        yield SpecIssue(("versions", "driver"), "GPU nodes are declared, so a driver version must be pinned")
    if drv is None:
        return
    if drv.fabric_manager is not None and drv.fabric_manager != drv.version:
        yield SpecIssue(
            ("versions", "driver", "fabric_manager"),
            f"fabric manager {drv.fabric_manager} must equal the driver version {drv.version}",
        )
    reported: set[str] = set()
    for group in spec.node_groups:
        if not group.hardware.gpu:
            continue
        os_family = group.os or spec.cluster.os
        source = drv.source or nvidia_packages.default_source(os_family)
        try:
            nvidia_packages.driver_install(os_family, source, int(drv.branch), drv.flavor)
        except nvidia_packages.UnsupportedDriver as e:
            if str(e) not in reported:
                reported.add(str(e))
                field = "source" if source is DriverSource.DISTRO and os_family.is_rpm else "version"
                yield SpecIssue(("versions", "driver", field), f"group {group.name!r} ({os_family.value}): {e}")


@rule
def platform_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Each group's OS on its CPU architecture is a row of the platform table; a Grace GPU model
    (GH200, GB200, GB300) runs on aarch64; GPUs only the open kernel modules drive get them; a
    mirror serving nodes of several architectures names ``{arch}`` in its URL."""
    drv = spec.versions.driver
    arches: set[Arch] = set()
    for gi, group in enumerate(spec.node_groups):
        os_family = group.os or spec.cluster.os
        if group.hardware.gpu:  # GPU nodes are the ones that read NVIDIA's CUDA repository
            arches.add(group.arch)
        try:
            platform_for(os_family, group.arch)
        except UnsupportedPlatform as e:
            yield SpecIssue(("node_groups", gi, "arch"), f"group {group.name!r}: {e}")
        model = GPU_MODELS.get(group.hardware.gpu.model) if group.hardware.gpu else None
        if model is None:
            continue
        if model.host_arch is not None and model.host_arch is not group.arch:
            yield SpecIssue(
                ("node_groups", gi, "arch"),
                f"group {group.name!r}: {model.name} nodes are {model.host_arch.value} (NVIDIA Grace CPU); "
                f"set arch: {model.host_arch.value} (it is {group.arch.value})",
            )
        if model.open_kernel_modules_only and drv is not None and drv.flavor is DriverFlavor.PROPRIETARY:
            yield SpecIssue(
                ("versions", "driver", "flavor"),
                f"group {group.name!r}: {model.name} ({model.architecture}) runs only with NVIDIA's open GPU kernel "
                "modules; set versions.driver.flavor: open",
            )
    mirror = spec.sources.mirrors.nvidia_cuda
    if spec.sources.mode is SourceMode.MIRROR and mirror and len(arches) > 1 and "{arch}" not in mirror:
        yield SpecIssue(
            ("sources", "mirrors", "nvidia_cuda"),
            "GPU nodes of several CPU architectures use this mirror: write {arch} where the URL names the architecture "
            "(NVIDIA's directories are x86_64 and sbsa)",
        )


@rule
def dcgm_rules(spec: Spec) -> Iterator[SpecIssue]:
    """DCGM's packages follow the driver's CUDA major and exist at versions.dcgm; the exporter is built for one DCGM."""
    if not spec.dcgm.enabled or not any(g.hardware.gpu for g in spec.node_groups):
        return
    drv = spec.versions.driver
    if drv is not None:
        try:
            missing = nvidia_packages.dcgm_lacks_cuda_packages(int(drv.branch), spec.versions.dcgm)
        except nvidia_packages.UnsupportedDriver as e:
            yield SpecIssue(("versions", "driver", "version"), f"{e}; or set dcgm.enabled: false")
        else:
            if missing:  # the plan would install packages that do not exist at that version
                yield SpecIssue(("versions", "dcgm"), missing)
    host_exporter = spec.dcgm.exporter and (
        spec.kubernetes is None or not operator_dcgm_exporter(spec.kubernetes.gpu_operator, spec.dcgm.enabled)
    )
    built_for = nvidia_packages.dcgm_of_exporter(spec.versions.dcgm_exporter)
    if host_exporter and built_for != spec.versions.dcgm:
        yield SpecIssue(
            ("versions", "dcgm_exporter"),
            f"dcgm-exporter {spec.versions.dcgm_exporter} is built against DCGM {built_for}, but versions.dcgm is "
            f"{spec.versions.dcgm}: pin a dcgm-exporter release '{spec.versions.dcgm}-<exporter version>' "
            f"or set versions.dcgm: {built_for}",
        )


@rule
def mig_rules(spec: Spec) -> Iterator[SpecIssue]:
    for name, entries in spec.mig.configs.items():
        for ei, entry in enumerate(entries):
            if not entry.mig_enabled and entry.mig_devices:
                yield SpecIssue(
                    ("mig", "configs", name, ei, "mig_devices"), "mig_devices given but mig_enabled is false"
                )
    used: set[str] = set()
    for gi, group in enumerate(spec.node_groups):
        if group.mig_config is not None:
            used.add(group.mig_config)
            yield from _group_mig_config(spec, gi, group)
    if spec.kubernetes and used and spec.kubernetes.gpu_operator.mig_strategy is MigStrategy.NONE:
        yield SpecIssue(
            ("kubernetes", "gpu_operator", "mig_strategy"),
            "node groups use MIG configs, so mig_strategy must be single or mixed",
        )
    if spec.kubernetes and spec.kubernetes.gpu_operator.mig_strategy is MigStrategy.SINGLE:
        yield from _single_strategy_layouts(spec)


def _group_mig_config(spec: Spec, gi: int, group: NodeGroup) -> Iterator[SpecIssue]:
    """The group's MIG config exists, fits a GPU that has MIG, and each entry lays out its GPUs once."""
    assert group.mig_config is not None
    loc = ("node_groups", gi, "mig_config")
    entries = spec.mig.configs.get(group.mig_config)
    if entries is None:
        known = ", ".join(spec.mig.configs) or "none defined"
        yield SpecIssue(loc, f"MIG config {group.mig_config!r} is not in mig.configs ({known})")
        return
    if group.hardware.gpu is None:
        yield SpecIssue(loc, f"group {group.name!r} has no GPUs, so no MIG config applies")
        return
    model = GPU_MODELS[group.hardware.gpu.model]
    if not model.supports_mig:
        yield SpecIssue(loc, no_mig_message(model.name, group.name))
        return
    claimed: dict[int, int] = {}
    for ei, entry in enumerate(entries):
        eloc = ("mig", "configs", group.mig_config, ei)
        yield from _entry_devices(group, eloc, ei, entry, claimed)
        yield from _entry_layout(group, model, eloc, entry)


def _entry_devices(
    group: NodeGroup, eloc: tuple[str | int, ...], ei: int, entry: MigDevices, claimed: dict[int, int]
) -> Iterator[SpecIssue]:
    """The entry's GPU indices: each once, not laid out by an earlier entry, within the group's GPUs."""
    assert group.hardware.gpu is not None
    count = group.hardware.gpu.count
    indices = list(range(count)) if entry.devices == "all" else entry.devices
    repeated = sorted(d for d, n in Counter(indices).items() if n > 1)
    if repeated:
        yield SpecIssue((*eloc, "devices"), f"GPU index(es) {repeated} listed more than once")
    overlap = sorted({d for d in indices if d in claimed})
    if overlap:
        yield SpecIssue(
            (*eloc, "devices"),
            f"GPU index(es) {overlap} already laid out by entry {claimed[overlap[0]]} of this config",
        )
    for d in indices:
        claimed.setdefault(d, ei)
    if isinstance(entry.devices, list):
        out = [d for d in entry.devices if d >= count or d < 0]
        if out:
            yield SpecIssue(
                (*eloc, "devices"),
                f"GPU index(es) {out} out of range for group {group.name!r} ({count} GPUs: 0-{count - 1})",
            )


def _entry_layout(
    group: NodeGroup, model: GpuModel, eloc: tuple[str | int, ...], entry: MigDevices
) -> Iterator[SpecIssue]:
    """The entry's profiles are the model's, in allowed counts, and fit one GPU's slices."""
    compute = memory = 0
    for profile_name, count in entry.mig_devices.items():
        profile = model.profile(profile_name)
        if profile is None:
            allowed = ", ".join(p.name for p in model.mig_profiles)
            yield SpecIssue(
                (*eloc, "mig_devices", profile_name),
                f"{profile_name!r} is not a MIG profile of {model.name} (group {group.name!r}); allowed: {allowed}",
            )
            continue
        if count < 1 or count > profile.max_count:
            yield SpecIssue(
                (*eloc, "mig_devices", profile_name),
                f"{count} x {profile_name} on one {model.name}: allowed 1..{profile.max_count}",
            )
        compute += profile.compute * count
        memory += profile.memory * count
    if compute > model.compute_slices or memory > MEMORY_SLICES:
        yield SpecIssue(
            (*eloc, "mig_devices"),
            f"layout needs {compute} compute / {memory} memory slices; one {model.name} has "
            f"{model.compute_slices} / {MEMORY_SLICES}",
        )


def _single_strategy_layouts(spec: Spec) -> Iterator[SpecIssue]:
    """The device plugin's ``single`` strategy offers a node's MIG devices as ``nvidia.com/gpu`` only
    when every GPU is in MIG mode with one profile (NVIDIA/k8s-device-plugin ``internal/rm``: "all
    devices on the node must be configured with the same migEnabled value", "more than one MIG device
    type present on node"); otherwise it refuses the node."""
    for gi, group in enumerate(spec.node_groups):
        entries = spec.mig.configs.get(group.mig_config or "")
        if not entries or group.hardware.gpu is None or Role.K8S_WORKER not in group.roles:
            continue
        if not GPU_MODELS[group.hardware.gpu.model].supports_mig:
            continue  # mig_rules says so first
        layout = mig_layout(entries, group.hardware.gpu.count)
        if layout.full_gpus or len(layout.devices) != 1:
            profiles = ", ".join(sorted(layout.devices)) or "none"
            yield SpecIssue(
                ("node_groups", gi, "mig_config"),
                f"MIG config {group.mig_config!r} leaves {layout.full_gpus} of the {layout.gpu_count} GPUs of "
                f"group {group.name!r} outside MIG and uses {len(layout.devices)} profile(s) ({profiles}): "
                "kubernetes.gpu_operator.mig_strategy single needs every GPU in MIG mode with one profile "
                "(the device plugin refuses such a node); use mig_strategy: mixed",
            )


@rule
def topology_rules(spec: Spec) -> Iterator[SpecIssue]:
    switches = {s.name: s for s in spec.topology.switches}
    for name in _dupes(s.name for s in spec.topology.switches):
        yield SpecIssue(("topology", "switches"), f"switch {name!r} is defined more than once")
    in_cycle = _cycles({s.name: s.parent for s in spec.topology.switches if s.parent is not None})
    for si, sw in enumerate(spec.topology.switches):
        if sw.parent is not None and sw.parent not in switches:
            yield SpecIssue(("topology", "switches", si, "parent"), f"switch {sw.parent!r} is not defined")
        if sw.name in in_cycle:
            yield SpecIssue(("topology", "switches", si, "parent"), f"switch {sw.name!r} is in a cycle")
    compute_groups = [(gi, g) for gi, g in enumerate(spec.node_groups) if Role.COMPUTE in g.roles]
    placed = [gi for gi, g in compute_groups if g.leaf_switch is not None]
    if placed and len(placed) != len(compute_groups):
        for gi, g in compute_groups:
            if g.leaf_switch is None:
                yield SpecIssue(
                    ("node_groups", gi, "leaf_switch"),
                    f"compute group {g.name!r} has no leaf switch while others do: Slurm's topology/tree "
                    "needs every compute node on a switch",
                )
    for gi, group in enumerate(spec.node_groups):
        if group.leaf_switch is None:
            continue
        loc = ("node_groups", gi, "leaf_switch")
        mapping = group.leaf_switch if isinstance(group.leaf_switch, dict) else {group.leaf_switch: group.hosts}
        covered: set[str] = set()
        members = set(group.hostnames)
        for switch, expr in mapping.items():
            if switch not in switches:
                yield SpecIssue(loc, f"leaf switch {switch!r} is not in topology.switches")
            try:
                names = hostlist.expand(expr)
            except hostlist.HostlistError as e:
                yield SpecIssue(loc, str(e))
                continue
            stray = [n for n in names if n not in members]
            if stray:
                yield SpecIssue(loc, f"{hostlist.compress(stray)} on {switch!r} are not hosts of this group")
            covered.update(names)
        missing = [n for n in group.hostnames if n not in covered]
        if missing:
            yield SpecIssue(loc, f"{hostlist.compress(missing)} have no leaf switch")


@rule
def kubernetes_rules(spec: Spec) -> Iterator[SpecIssue]:
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    tenants = k.batch_queue.tenants
    for name in _dupes(t.name for t in tenants):
        yield SpecIssue(("kubernetes", "batch_queue", "tenants"), f"tenant {name!r} is defined more than once")
    by_k8s_name: dict[str, list[str]] = {}
    for t in tenants:
        by_k8s_name.setdefault(k8s_name(t.name), []).append(t.name)
    for name in _dupes(k8s_name(t.name) for t in tenants):
        same = by_k8s_name[name]
        if len(set(same)) > 1:
            yield SpecIssue(
                ("kubernetes", "batch_queue", "tenants"),
                f"tenants {' and '.join(repr(n) for n in same)} are the same Kubernetes name {name!r} "
                "('_' becomes '-'): rename one",
            )
    for ns in _dupes(t.namespace for t in tenants):
        yield SpecIssue(("kubernetes", "batch_queue", "tenants"), f"namespace {ns!r} is used by two tenants")
    if tenants and k.batch_queue.kind == "none":
        yield SpecIssue(("kubernetes", "batch_queue", "kind"), "tenants need a batch queue: kueue or volcano")
    total = sum(n.hardware.gpu_count for n in resolve_nodes(spec) if n.has(Role.K8S_WORKER))
    quota = sum(t.gpu_quota for t in tenants)
    if quota > total:
        yield SpecIssue(
            ("kubernetes", "batch_queue", "tenants"),
            f"tenant GPU quotas add up to {quota}, more than the {total} GPUs on k8s-worker nodes",
        )


@rule
def kubeadm_rules(spec: Spec) -> Iterator[SpecIssue]:
    """What kubeadm and pkgs.k8s.io need (gpuforge.spec.k8s_upstream cites each)."""
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    version = spec.versions.kubernetes
    if k8s_upstream.minor_of(version) < k8s_upstream.FIRST_MINOR:
        yield SpecIssue(
            ("versions", "kubernetes"),
            f"Kubernetes {version} has no packages: pkgs.k8s.io starts at 1.{k8s_upstream.FIRST_MINOR} and the "
            f"Google-hosted repositories are gone; pick 1.{k8s_upstream.FIRST_MINOR} or later",
        )
    planes = _role_nodes(spec, Role.K8S_CONTROL_PLANE)
    if len(planes) > 1 and k.api_endpoint is None:
        yield SpecIssue(
            ("kubernetes", "api_endpoint"),
            f"{len(planes)} control planes ({hostlist.compress(planes)}) need a stable API endpoint in front of "
            "them (a load balancer or DNS name, kubeadm's controlPlaneEndpoint): set kubernetes.api_endpoint, "
            "or keep one control plane",
        )
    if spec.container_runtime.engine is not ContainerEngine.CONTAINERD:
        yield SpecIssue(
            ("container_runtime", "engine"),
            f"Kubernetes nodes need containerd (the kubelet talks CRI to {k8s_upstream.CRI_SOCKET_CONTAINERD}; "
            f"Docker Engine is no CRI runtime since Kubernetes 1.24): set engine: containerd",
        )


@rule
def gpu_operator_rules(spec: Spec) -> Iterator[SpecIssue]:
    """One DCGM host engine per GPU.

    dcgm-exporter starts an embedded host engine unless it is pointed at a running one, and NVIDIA
    says to configure it accordingly on systems that run nv-hostengine (DCGM docs: Install DCGM
    Exporter; GPU telemetry: DCGM Exporter). gpuforge's host dcgm-exporter uses the host engine
    (``-r localhost:5555``); the operator's would start a second one next to it.
    """
    k = spec.kubernetes
    if k is None or spec.cluster.scheduler is not Scheduler.KUBERNETES:
        return
    gpu_workers = [n for n in resolve_nodes(spec) if n.has(Role.K8S_WORKER) and n.hardware.gpu is not None]
    if spec.dcgm.enabled and k.gpu_operator.dcgm_exporter is True and gpu_workers:
        yield SpecIssue(
            ("kubernetes", "gpu_operator", "dcgm_exporter"),
            "the GPU Operator's dcgm-exporter starts its own DCGM host engine, and dcgm.enabled runs nv-hostengine "
            "on the same GPUs (two host engines per GPU: profiling metrics break): set "
            "gpu_operator.dcgm_exporter: false (gpuforge runs dcgm-exporter on the host against the host engine, "
            "dcgm.exporter) or dcgm.enabled: false",
        )


@rule
def source_rules(spec: Spec) -> Iterator[SpecIssue]:
    src = spec.sources
    if src.mode is SourceMode.OFFLINE and not src.bundle_dir:
        yield SpecIssue(("sources", "bundle_dir"), "mode offline needs bundle_dir (made by 'gpuforge bundle')")
    if src.mode is SourceMode.OFFLINE and not src.bundle_fingerprint:
        yield SpecIssue(
            ("sources", "bundle_fingerprint"),
            "mode offline needs bundle_fingerprint: the signing key fingerprint 'gpuforge bundle' printed "
            "(without it a changed bundle could re-sign itself); 'gpuforge bundle SPEC -o DIR' builds from this "
            "spec without it and ends with the line to add: 'pin it: sources.bundle_fingerprint: <40 hex digits>'",
        )
    if src.mode is SourceMode.MIRROR and not (src.apt_proxy or any(src.mirrors.model_dump().values())):
        yield SpecIssue(("sources", "mirrors"), "mode mirror needs apt_proxy or at least one mirror URL")


@rule
def site_rules(spec: Spec) -> Iterator[SpecIssue]:
    """Site Ansible steps and testinfra checks name known roles or groups; users are unique."""
    known = {r.value for r in Role} | {g.name for g in spec.node_groups}
    names = [s.name for s in spec.site.ansible]
    for name in _dupes(names):
        yield SpecIssue(("site", "ansible"), f"step {name!r} is listed more than once")
    for i, step in enumerate(spec.site.ansible):
        if (step.role is None) == (step.playbook is None):
            yield SpecIssue(("site", "ansible", i), f"{step.name}: give exactly one of role or playbook")
        for t in step.targets:
            if t not in known:
                yield SpecIssue(("site", "ansible", i, "targets"), f"{t!r} is neither a node role nor a node group")
    for i, checks in enumerate(spec.site.testinfra):
        for t in checks.targets:
            if t not in known:
                yield SpecIssue(("site", "testinfra", i, "targets"), f"{t!r} is neither a node role nor a node group")
    # gpuforge's own build (slurm.source: build) makes the packages at versions.slurm on rpm platforms too
    # (slurm_rpm_build: no %{?dist}), and dnf installs them at that version
    if spec.slurm is not None and spec.versions.slurm != "distro" and spec.slurm.source is not SlurmSource.BUILD:
        from gpuforge.spec.roles import deploys_for

        rpm = sorted(n.name for n in resolve_nodes(spec) if not n.os.is_deb and "slurm" in deploys_for(n))
        if rpm:
            yield SpecIssue(
                ("versions", "slurm"),
                f"an exact Slurm version is held with apt (Debian/Ubuntu); {hostlist.compress(rpm)} run RHEL: "
                "use 'distro' there",
            )
    if spec.slurm is not None:
        users = spec.slurm.users
        for name in _dupes(u.name for u in users):
            yield SpecIssue(("slurm", "users"), f"user {name} is listed more than once")
        for uid in _dupes(str(u.uid) for u in users):
            yield SpecIssue(("slurm", "users"), f"UID {uid} is given to more than one user")
        for gid in _dupes(str(u.group_id) for u in users):
            yield SpecIssue(("slurm", "users"), f"GID {gid} is given to more than one user's group")


rule(acceptance_rules)


RULES += [storage_rules.storage_rules, storage_rules.shared_state_rules]
RULES.append(k8s_rules.kubernetes_day2_rules)
RULES.append(fabric_rules)
RULES.append(network_operator_rules)
RULES.append(hardware_issues)
RULES.append(slurm_release_rules)
RULES.append(slurm_parameter_rules)
RULES.append(slurm_build_rules)
RULES.append(bmc_rules)
RULES.append(provisioning_rules)


def check_rules(spec: Spec) -> list[SpecIssue]:
    """Every cross-field problem of ``spec``."""
    issues: list[SpecIssue] = []
    for fn in RULES:
        issues.extend(fn(spec))
    return issues

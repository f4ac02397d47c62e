"""Cross-field rules of the scheduler sections, Slurm and its topology.

Which scheduler section and node roles a spec has; partitions, QOS and accounts (no account its own
ancestor); accounting's database node; the distribution's Slurm on a cgroup-v2-only platform; MIG
bound through NVML; the switch tree of ``topology/tree``. Each problem names its field; registered in
:mod:`gpuforge.spec.rules` (``RULES``).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuforge.spec import hostlist, slurm_gpu, slurm_releases
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.model import K8S_ROLES, SCHEDULER_ROLES, SLURM_ROLES, Account, PreemptMode, Role, Scheduler, Spec
from gpuforge.spec.rule_helpers import cycle_text, cycles, dupes, role_nodes
from gpuforge.spec.slurm_model import ProcessTracking
from gpuforge.spec.slurm_packages import CGROUP_V2_SINCE, SlurmSource


def scheduler_sections_and_roles(spec: Spec) -> Iterator[SpecIssue]:
    sched = spec.cluster.scheduler
    if sched is Scheduler.SLURM:
        if spec.slurm is None:
            yield SpecIssue(("slurm",), "cluster.scheduler is slurm, so a slurm section is required")
        if spec.kubernetes is not None:
            yield SpecIssue(("kubernetes",), "only allowed with cluster.scheduler: kubernetes (it is slurm)")
        wrong = K8S_ROLES
        ctl = role_nodes(spec, Role.CONTROLLER)
        if len(ctl) not in (1, 2):
            yield SpecIssue(
                ("node_groups",),
                f"a Slurm cluster needs exactly one controller (two for HA); found {len(ctl)}"
                + (f": {hostlist.compress(ctl)}" if ctl else ""),
            )
        if not role_nodes(spec, Role.COMPUTE):
            yield SpecIssue(("node_groups",), "no node has role compute")
    else:
        if spec.kubernetes is None:
            yield SpecIssue(("kubernetes",), "cluster.scheduler is kubernetes, so a kubernetes section is required")
        if spec.slurm is not None:
            yield SpecIssue(("slurm",), "only allowed with cluster.scheduler: slurm (it is kubernetes)")
        wrong = SLURM_ROLES
        if not role_nodes(spec, Role.K8S_CONTROL_PLANE):
            yield SpecIssue(("node_groups",), "a Kubernetes cluster needs at least one k8s-control-plane node")
    for gi, group in enumerate(spec.node_groups):
        bad = sorted(r.value for r in group.roles if r in wrong)
        if bad:
            yield SpecIssue(
                ("node_groups", gi, "roles"),
                f"role(s) {', '.join(bad)} do not fit scheduler {sched.value}; its roles: "
                f"{', '.join(r.value for r in SCHEDULER_ROLES[sched])}",
            )
    if spec.monitoring.prometheus and not role_nodes(spec, Role.MONITORING):
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
    for name in dupes(a.name for a in accounts):
        yield SpecIssue(("slurm", "accounts"), f"account {name!r} is defined more than once")
    in_cycle = cycles({a.name: a.parent for a in accounts})
    for ai, account in enumerate(accounts):
        if account.name in in_cycle:
            chain = cycle_text(*in_cycle[account.name])
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


def slurm_rules(spec: Spec) -> Iterator[SpecIssue]:
    s = spec.slurm
    if s is None or spec.cluster.scheduler is not Scheduler.SLURM:
        return  # a section for the other scheduler is reported once, by scheduler_sections_and_roles
    compute = set(role_nodes(spec, Role.COMPUTE))
    for name in dupes(p.name for p in s.partitions):
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
    for name in dupes(q.name for q in s.qos):
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
    db_nodes = role_nodes(spec, Role.ACCOUNTING_DB)
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


def topology_rules(spec: Spec) -> Iterator[SpecIssue]:
    switches = {s.name: s for s in spec.topology.switches}
    for name in dupes(s.name for s in spec.topology.switches):
        yield SpecIssue(("topology", "switches"), f"switch {name!r} is defined more than once")
    in_cycle = cycles({s.name: s.parent for s in spec.topology.switches if s.parent is not None})
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

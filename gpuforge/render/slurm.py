"""Slurm configuration: small pure functions, spec in, text out."""

from __future__ import annotations

from collections import defaultdict

from gpuforge.render.escape import slurm_conf_value
from gpuforge.render.files import RenderedFile, Secrets, header, per_spec, render_template
from gpuforge.render.health import HEALTH_PROGRAM, MUNGE_KEY
from gpuforge.spec import hostlist
from gpuforge.spec.fabric_rules import pmix_default, propagate_except
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.model import (
    ConfigMode,
    MigDevices,
    NodeGroup,
    ProcessTracking,
    Role,
    Slurm,
    Spec,
)
from gpuforge.spec.nodes import Node, nodes_with, resolve_nodes, select_nodes
from gpuforge.spec.platforms import Platform
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.slurm_gpu import gpu_device_files, uses_nvml
from gpuforge.spec.slurm_packages import PIN_PATTERNS, SITE_DEB_PLUGIN_DIR, SlurmSource, package_for

SLURM_ETC = "/etc/slurm"


def slurm_section(spec: Spec) -> Slurm:
    if spec.slurm is None:
        raise ValueError("spec has no slurm section")
    return spec.slurm


def plugin_dir(platform: Platform, spec: Spec | None = None) -> str:
    """Where Slurm looks for plugins (pyxis goes there): the platform table's for the distro's Slurm;
    for SchedMD's debs (``slurm.source: site``) /usr/lib/<triplet>/slurm (``slurm_packages``)."""
    if spec is not None and spec.slurm is not None and spec.slurm.source.schedmd_packaging and platform.is_deb:
        return SITE_DEB_PLUGIN_DIR.format(triplet=platform.names.gnu_triplet)
    return platform.slurm_plugin_dir


def mig_gres_counts(entries: list[MigDevices], gpu_count: int) -> dict[str, int]:
    """MIG devices per profile on one node, for a mig-parted config."""
    counts: dict[str, int] = defaultdict(int)
    for entry in entries:
        gpus = gpu_count if entry.devices == "all" else len(set(entry.devices))
        if not entry.mig_enabled:
            continue
        for profile, n in entry.mig_devices.items():
            counts[profile] += n * gpus
    return dict(sorted(counts.items()))


def _mig_full_gpus(entries: list[MigDevices], gpu_count: int) -> int:
    """GPUs of a node left out of MIG (still whole GPUs)."""
    covered: set[int] = set()
    for entry in entries:
        if entry.mig_enabled:
            covered |= set(range(gpu_count)) if entry.devices == "all" else set(entry.devices)
    return gpu_count - len(covered)


def node_gres(spec: Spec, group: NodeGroup) -> list[str]:
    """GRES of each node in a group, e.g. ``['gpu:h100:8', 'mps:800']``."""
    gpu = group.hardware.gpu
    if gpu is None:
        return []
    model = GPU_MODELS[gpu.model]
    gres: list[str] = []
    if group.mig_config:
        entries = spec.mig.configs[group.mig_config]
        whole = _mig_full_gpus(entries, gpu.count)
        if whole:
            gres.append(f"gpu:{model.gres_type}:{whole}")
        gres.extend(f"gpu:{profile}:{n}" for profile, n in mig_gres_counts(entries, gpu.count).items())
    else:
        gres.append(f"gpu:{model.gres_type}:{gpu.count}")
    if slurm_section(spec).mps.enabled and not group.mig_config:
        gres.append(f"mps:{slurm_section(spec).mps.shares_per_gpu * gpu.count}")
    return gres


def node_lines(spec: Spec) -> list[str]:
    """``NodeName=`` lines, one per compute group, with the group's own figures (stated, or
    discovered: ``gpuforge.spec.discovered``); ValueError for a group without them (never a default)."""
    lines = []
    for group in spec.node_groups:
        if Role.COMPUTE not in group.roles:
            continue
        hw = group.hardware
        if hw.missing_figures:
            raise ValueError(
                f"node group {group.name} has no {', '.join(hw.missing_figures)}: run gpuforge discover SPEC"
            )
        parts = [
            f"NodeName={hostlist.compress(group.hostnames)}",
            f"CPUs={hw.cpus}",
            f"Sockets={hw.sockets}",
            f"CoresPerSocket={hw.cores_per_socket}",
            f"ThreadsPerCore={hw.threads_per_core}",
            f"RealMemory={hw.real_memory_mb}",
        ]
        gres = node_gres(spec, group)
        if gres:
            parts.append(f"Gres={','.join(gres)}")
        parts.append(f"Feature={group.name}")
        parts.append("State=UNKNOWN")
        lines.append(" ".join(parts))
    return lines


def partition_lines(spec: Spec) -> list[str]:
    """``PartitionName=`` lines."""
    lines = []
    for part in slurm_section(spec).partitions:
        parts = [
            f"PartitionName={part.name}",
            f"Nodes={hostlist.compress(select_nodes(spec, part.nodes))}",
            f"Default={'YES' if part.default else 'NO'}",
            f"MaxTime={part.max_time}",
        ]
        if part.default_time:
            parts.append(f"DefaultTime={part.default_time}")
        if part.max_nodes:
            parts.append(f"MaxNodes={part.max_nodes}")
        parts.append(f"PriorityTier={part.priority_tier}")
        if part.qos:
            parts.append(f"QOS={part.qos}")
        if part.allow_accounts:
            parts.append(f"AllowAccounts={','.join(part.allow_accounts)}")
        parts.append(f"OverSubscribe={part.oversubscribe}")
        parts.append("State=UP")
        lines.append(" ".join(parts))
    return lines


def gres_types(spec: Spec) -> str:
    types = []
    if any(g.hardware.gpu for g in spec.node_groups):
        types.append("gpu")
    if slurm_section(spec).mps.enabled:
        types.append("mps")
    return ",".join(types)


@per_spec
def slurm_conf(spec: Spec) -> str:
    """/etc/slurm/slurm.conf."""
    s = slurm_section(spec)
    linuxproc = s.process_tracking is ProcessTracking.LINUXPROC
    db = nodes_with(spec, Role.ACCOUNTING_DB)
    accounting = None
    if s.accounting.enabled and db:
        tres = "gres/gpu" + (",gres/mps" if s.mps.enabled else "")
        accounting = {"host": db[0].name, "enforce": ",".join(s.accounting.enforce), "tres": tres}
    health = None
    if s.health_check.enabled and s.health_check.interval > 0:
        health = {
            "program": HEALTH_PROGRAM,
            "interval": s.health_check.interval,
            "node_state": s.health_check.node_state,
        }
    return render_template(
        "slurm/slurm.conf.j2",
        header=header().rstrip("\n"),
        cluster=spec.cluster.name,
        controllers=[n.name for n in nodes_with(spec, Role.CONTROLLER)],
        state_save_location=slurm_conf_value(s.state_save_location),
        failover=s.failover,
        configless=s.config_mode is ConfigMode.CONFIGLESS,
        proctrack="proctrack/linuxproc" if linuxproc else "proctrack/cgroup",
        task_plugin="task/affinity" if linuxproc else "task/cgroup,task/affinity",
        jobacct="jobacct_gather/linux" if linuxproc else "jobacct_gather/cgroup",
        mpi_default="pmix" if pmix_default(spec) else None,  # fabric_packages: slurm-mpidefault
        propagate_except=propagate_except(spec),  # fabric_packages: slurm-memlock
        gres_types=gres_types(spec),
        topology=bool(topology_conf(spec)),
        priority=s.priority,
        preempt_mode=s.preempt_mode.value.upper(),
        accounting=accounting,
        health=health,
        extra=[(key, slurm_conf_value(value)) for key, value in sorted(s.extra_config.items())],
        node_lines=node_lines(spec),
        partition_lines=partition_lines(spec),
    )


@per_spec
def gres_conf(spec: Spec) -> str:
    """/etc/slurm/gres.conf: ``AutoDetect=nvml`` per group where the NVML plugin is there, else the
    GPUs' device files (``File=/dev/nvidiaN``; slurm_gpu cites both).

    Whole GPUs keep their ``File=`` lines beside ``AutoDetect=nvml`` (Slurm checks what it finds
    against them). MIG slices are found by NVML only: their ``/dev/nvidia-caps`` files follow the
    instance IDs the driver hands out on the node, and Slurm does not sanity-check MIG lines.
    """
    lines = [header().rstrip("\n"), "AutoDetect=off"]
    s = slurm_section(spec)
    for group in spec.node_groups:
        gpu = group.hardware.gpu
        if gpu is None or Role.COMPUTE not in group.roles:
            continue
        names = hostlist.compress(group.hostnames)
        nvml = uses_nvml(spec, group)
        if nvml:
            lines.append(f"NodeName={names} AutoDetect=nvml")
        if group.mig_config:
            if not nvml:
                raise ValueError(f"node group {group.name}: MIG slices need slurm.gpu_autodetect: nvml")
            continue
        files = gpu_device_files(gpu.count)
        lines.append(f"NodeName={names} Name=gpu Type={GPU_MODELS[gpu.model].gres_type} File={files}")
        if s.mps.enabled:
            lines.append(f"NodeName={names} Name=mps Count={s.mps.shares_per_gpu * gpu.count} File={files}")
    return "\n".join(lines) + "\n"


@per_spec
def cgroup_conf(spec: Spec) -> str:
    """/etc/slurm/cgroup.conf."""
    return render_template("slurm/cgroup.conf.j2", header=header().rstrip("\n"), cg=slurm_section(spec).cgroups)


@per_spec
def topology_conf(spec: Spec) -> str:
    """/etc/slurm/topology.conf from the switch tree ('' when no node names a leaf switch)."""
    leaves: dict[str, list[str]] = defaultdict(list)
    for node in resolve_nodes(spec):
        if node.leaf_switch and node.has(Role.COMPUTE):
            leaves[node.leaf_switch].append(node.name)
    if not leaves:
        return ""
    parents = {sw.name: sw.parent for sw in spec.topology.switches}
    populated = set(leaves)
    for leaf in leaves:  # every switch above a leaf with nodes carries traffic
        up = parents.get(leaf)
        while up and up not in populated:
            populated.add(up)
            up = parents.get(up)
    children: dict[str, list[str]] = defaultdict(list)
    for sw in spec.topology.switches:
        if sw.parent and sw.name in populated:
            children[sw.parent].append(sw.name)
    lines = [header().rstrip("\n")]
    for sw in spec.topology.switches:
        if sw.name in leaves:
            lines.append(f"SwitchName={sw.name} Nodes={hostlist.compress(leaves[sw.name])}")
    for sw in spec.topology.switches:
        if sw.name in children:
            lines.append(f"SwitchName={sw.name} Switches={hostlist.compress(children[sw.name])}")
    return "\n".join(lines) + "\n"


@per_spec
def plugstack_conf(spec: Spec, platform: Platform) -> str:
    """/etc/slurm/plugstack.conf.

    Pushed configs include plugstack.conf.d/; configless mode serves only plugstack.conf
    itself, so there the pyxis line goes in directly.
    """
    s = slurm_section(spec)
    lines = [header().rstrip("\n")]
    if s.config_mode is ConfigMode.CONFIGLESS:
        if s.containers.pyxis:
            lines.append(f"required {plugin_dir(platform, spec)}/spank_pyxis.so")
    else:
        lines.append(f"include {SLURM_ETC}/plugstack.conf.d/*.conf")
    return "\n".join(lines) + "\n"


def pyxis_conf(platform: Platform, spec: Spec | None = None) -> str:
    """/etc/slurm/plugstack.conf.d/pyxis.conf."""
    return header() + f"required {plugin_dir(platform, spec)}/spank_pyxis.so\n"


def slurmdbd_conf(spec: Spec, secrets: Secrets) -> str:
    """/etc/slurm/slurmdbd.conf (holds the DB password: a secret file)."""
    s = slurm_section(spec)
    return render_template(
        "slurm/slurmdbd.conf.j2",
        header=header().rstrip("\n"),
        dbd_host=nodes_with(spec, Role.ACCOUNTING_DB)[0].name,
        db_user=s.accounting.db_user,
        db_password=secrets.slurmdbd_db_password,
        database=s.accounting.database,
    )


@per_spec
def slurmd_defaults(spec: Spec) -> str:
    """/etc/default/slurmd: configless nodes fetch their config from the controller."""
    s = slurm_section(spec)
    if s.config_mode is ConfigMode.CONFIGLESS:
        servers = ",".join(n.name for n in nodes_with(spec, Role.CONTROLLER))
        return header() + f'SLURMD_OPTIONS="--conf-server {servers}"\n'
    return header() + 'SLURMD_OPTIONS=""\n'


CONFIGLESS_DROPIN = "# Managed by gpuforge: configless slurmd has no local slurm.conf.\n[Unit]\nConditionPathExists=\n"


def munge_key_file(secrets: Secrets) -> RenderedFile:
    """The cluster's munge key, 0400 munge:munge (a secret: redacted in renders and plans)."""
    return RenderedFile(MUNGE_KEY, secrets.munge_key, mode="0400", owner="munge", group="munge", secret=True)


def slurm_files(spec: Spec, node: Node, secrets: Secrets) -> list[RenderedFile]:
    """Every Slurm file a node needs, by its roles and the config mode (and munge's key)."""
    s = slurm_section(spec)
    files: list[RenderedFile] = [munge_key_file(secrets)] if "munge" in deploys_for(node) else []
    is_ctl = node.has(Role.CONTROLLER)
    pushed = s.config_mode is ConfigMode.PUSHED
    if is_ctl or pushed or node.has(Role.LOGIN):
        files.append(RenderedFile(f"{SLURM_ETC}/slurm.conf", slurm_conf(spec)))
        files.append(RenderedFile(f"{SLURM_ETC}/gres.conf", gres_conf(spec)))
        files.append(RenderedFile(f"{SLURM_ETC}/cgroup.conf", cgroup_conf(spec)))
        files.append(RenderedFile(f"{SLURM_ETC}/plugstack.conf", plugstack_conf(spec, node.platform)))
        topo = topology_conf(spec)
        if topo:
            files.append(RenderedFile(f"{SLURM_ETC}/topology.conf", topo))
    if s.containers.pyxis and (node.has(Role.COMPUTE) or node.has(Role.LOGIN)) and pushed:
        files.append(RenderedFile(f"{SLURM_ETC}/plugstack.conf.d/pyxis.conf", pyxis_conf(node.platform, spec)))
    if node.has(Role.COMPUTE):
        files.append(RenderedFile("/etc/default/slurmd", slurmd_defaults(spec)))
        if not pushed:
            files.append(
                RenderedFile("/etc/systemd/system/slurmd.service.d/gpuforge-configless.conf", CONFIGLESS_DROPIN)
            )
    if node.has(Role.ACCOUNTING_DB) and s.accounting.enabled:
        files.append(
            RenderedFile(
                f"{SLURM_ETC}/slurmdbd.conf",
                slurmdbd_conf(spec, secrets),
                mode="0600",
                owner="slurm",
                group="slurm",
                secret=True,
            )
        )
    return files


SLURM_PIN = "/etc/apt/preferences.d/gpuforge-slurm"
#: Binary packages of Debian's slurm-wlm source that must move together.
SLURM_PIN_PACKAGES = PIN_PATTERNS[SlurmSource.DISTRO]


def slurm_version_pin(spec: Spec) -> str | None:
    """The package version ``versions.slurm`` holds, or None for 'distro'."""
    v = spec.versions.slurm
    return None if v == "distro" else v


def slurm_package(spec: Spec, name: str, deb: bool = True) -> str:
    """``slurmd`` or ``slurmd=<versions.slurm>`` (gpuforge's pin form) when Slurm is held at a version;
    the package of that role on a deb or rpm node from ``slurm.source`` (``slurm_packages``: EPEL's
    ``slurm-slurmd``, SchedMD's ``slurm-smd-slurmd``). A role whose files come with another package
    (SchedMD's NVML plugin) gives ``""``: leave it out."""
    v = slurm_version_pin(spec)
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    pkg = package_for(source, deb, name)
    if pkg is None:
        return ""
    return f"{pkg}={v}" if v else pkg


def slurm_dev_package(spec: Spec, deb: bool) -> str:
    """Slurm's headers (pyxis builds against them): libslurm-dev / slurm-devel, or SchedMD's."""
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    return package_for(source, deb, "libslurm-dev") or ("libslurm-dev" if deb else "slurm-devel")


def slurm_apt_pin(spec: Spec, node: Node) -> list[RenderedFile]:
    """apt preferences that hold every Slurm package at ``versions.slurm`` (Slurm nodes, apt only)."""
    v = slurm_version_pin(spec)
    if v is None or spec.slurm is None or not node.os.is_deb or "slurm" not in deploys_for(node):
        return []
    return [RenderedFile(SLURM_PIN, slurm_pin_text(spec))]


def slurm_pin_text(spec: Spec) -> str:
    """The apt preferences holding every package of the Slurm build at ``versions.slurm``."""
    v = slurm_version_pin(spec)
    source = spec.slurm.source if spec.slurm is not None else SlurmSource.DISTRO
    return (
        f"# gpuforge: Slurm is held at versions.slurm ({v}); apt upgrades leave it there.\n"
        f"Package: {PIN_PATTERNS[source]}\nPin: version {v}\nPin-Priority: 1001\n"
    )

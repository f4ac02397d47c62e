"""The spec's Slurm section: partitions, QOS, accounts, users, accounting, health check, cgroups."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import field_validator

from gpuforge.spec.digest_types import Sha256
from gpuforge.spec.patterns import SLURM_TIME
from gpuforge.spec.platforms import Arch as Arch
from gpuforge.spec.platforms import OsFamily as OsFamily
from gpuforge.spec.policy import live, rebuild, rolling
from gpuforge.spec.slurm_ha import DEFAULT_STATE_DIR, Failover, SlurmPath
from gpuforge.spec.slurm_packages import SlurmSource
from gpuforge.spec.strict import NAME as NAME
from gpuforge.spec.strict import Name, StrictModel
from gpuforge.spec.types import (
    HttpUrl,
    NodeSelector,
    PlainText,
    PosixUser,
    slurm_parameter,
)

# --------------------------------------------------------------------------- slurm


class ProcessTracking(StrEnum):
    CGROUP = "cgroup"
    LINUXPROC = "linuxproc"


class ConfigMode(StrEnum):
    PUSHED = "pushed"
    CONFIGLESS = "configless"


class GpuAutodetect(StrEnum):
    """How gres.conf finds a node's GPUs (``gpuforge.spec.slurm_gpu``)."""

    AUTO = "auto"
    NVML = "nvml"
    OFF = "off"


class PreemptMode(StrEnum):
    OFF = "off"
    REQUEUE = "requeue"
    CANCEL = "cancel"
    SUSPEND = "suspend"


class Partition(StrictModel):
    """A Slurm partition."""

    name: Name = live(description="Partition name")
    nodes: NodeSelector = live(description="Hostlist or node group names, comma-separated")
    default: bool = live(False, "Default partition")
    max_time: str = live("UNLIMITED", "MaxTime", pattern=SLURM_TIME)
    default_time: str | None = live(None, "DefaultTime", pattern=SLURM_TIME)
    max_nodes: int | None = live(None, "MaxNodes per job", ge=1)
    priority_tier: int = live(1, "PriorityTier", ge=0, le=65533)
    qos: Name | None = live(None, "Partition QOS")
    allow_accounts: list[Name] | None = live(None, "AllowAccounts (default: all)")
    oversubscribe: Literal["NO", "YES", "EXCLUSIVE", "FORCE"] = live("NO", "OverSubscribe")


class Qos(StrictModel):
    """A Slurm QOS."""

    name: Name = live(description="QOS name")
    priority: int = live(0, "Priority", ge=0)
    preempt: list[Name] = live(default_factory=list, description="QOS this one may preempt")
    preempt_mode: PreemptMode | None = live(None, "PreemptMode of jobs in this QOS (default: cluster's)")
    grp_gpus: int | None = live(None, "GrpTRES=gres/gpu=N (all jobs of the QOS together)", ge=0)
    max_gpus_per_user: int | None = live(None, "MaxTRESPerUser=gres/gpu=N", ge=0)
    max_wall: str | None = live(None, "MaxWall", pattern=SLURM_TIME)


class Account(StrictModel):
    """A fair-share account with its users."""

    name: Name = live(description="Account name")
    description: PlainText | None = live(None, "Description")
    organization: PlainText | None = live(None, "Organization")
    parent: Name = live("root", "Parent account")
    fairshare: int = live(1, "Fairshare (shares)", ge=0)
    users: list[str] = live(default_factory=list, description="Users in this account")
    qos: list[Name] = live(default_factory=list, description="QOS allowed (default: normal)")
    default_qos: Name | None = live(None, "DefaultQOS")

    @field_validator("users")
    @classmethod
    def _user_names(cls, v: list[str]) -> list[str]:
        bad = [u for u in v if not re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}", u)]
        if bad:
            raise ValueError(f"invalid user names {bad}: lowercase letters, digits, _ . - only")
        return v


class UnixUser(StrictModel):
    """A local Unix user made on every Slurm node with a fixed UID and GID (sites without LDAP/SSSD)."""

    name: PosixUser = live(description="User name (also the name of its primary group)")
    uid: int = live(description="UID, the same on every node", ge=1000, le=60000)
    gid: int | None = live(None, "GID of the user's own group (default: the UID)", ge=1000, le=60000)
    shell: Literal["/bin/bash", "/bin/sh", "/usr/sbin/nologin"] = live("/bin/bash", "Login shell")

    @property
    def group_id(self) -> int:
        return self.gid if self.gid is not None else self.uid


class Accounting(StrictModel):
    """slurmdbd + MariaDB accounting."""

    enabled: bool = rebuild(True, "Run slurmdbd with MariaDB on the accounting-db node")
    database: str = rebuild("slurm_acct_db", "Database name", pattern=r"^[A-Za-z0-9_]+$")
    db_user: str = rebuild("slurm", "Database user", pattern=r"^[A-Za-z0-9_]+$")
    enforce: list[Literal["associations", "limits", "qos", "safe", "wckeys"]] = live(
        default_factory=lambda: ["associations", "limits", "qos"],
        description="AccountingStorageEnforce",
    )


class Priority(StrictModel):
    """Multifactor priority with fair-share."""

    weight_fairshare: int = live(10000, "PriorityWeightFairshare", ge=0)
    weight_age: int = live(1000, "PriorityWeightAge", ge=0)
    weight_qos: int = live(10000, "PriorityWeightQOS", ge=0)
    weight_job_size: int = live(0, "PriorityWeightJobSize", ge=0)
    weight_partition: int = live(1000, "PriorityWeightPartition", ge=0)
    decay_half_life: str = live("7-0", "PriorityDecayHalfLife", pattern=SLURM_TIME)


class HealthCheck(StrictModel):
    """gpuforge's node health check as Slurm's HealthCheckProgram."""

    enabled: bool = live(True, "Install 'gpuforge health' as HealthCheckProgram")
    interval: int = live(300, "HealthCheckInterval, seconds (0 = off)", ge=0)
    node_state: str = live("ANY", "HealthCheckNodeState", pattern=r"^[A-Z_,]+$")


class Cgroups(StrictModel):
    """cgroup.conf: a change restarts slurmd on every compute node; running jobs carry on with their limits.

    Live, not rolling: slurmd reads cgroup.conf when it starts (a configless slurmd fetches it from
    slurmctld), and Slurm documents a slurmd restart as leaving running jobs alone ("Upgrades will not
    interrupt running jobs as long as SlurmdTimeout is not reached", https://slurm.schedmd.com/upgrades.html#slurmd;
    the jobs' slurmstepd processes live apart from slurmd, https://slurm.schedmd.com/cgroup_v2.html). task/cgroup
    sets a job step's limits when it makes the step's cgroup, so a change holds for the steps that start after
    it, not for those already running (cgroup.conf(5)).
    """

    constrain_cores: bool = live(True, "ConstrainCores (for job steps started after a change)")
    constrain_devices: bool = live(True, "ConstrainDevices (for job steps started after a change)")
    constrain_ram_space: bool = live(True, "ConstrainRAMSpace (for job steps started after a change)")


class Mps(StrictModel):
    """CUDA MPS shares as a GRES."""

    enabled: bool = rolling(False, "Offer gres/mps on GPU nodes")
    shares_per_gpu: int = rolling(100, "MPS shares per GPU", ge=1, le=1000)


class Containers(StrictModel):
    """Containers under Slurm."""

    enroot: bool = live(True, "Install enroot on compute and login nodes")
    pyxis: bool = rolling(True, "Build and install the pyxis SPANK plugin")


class SlurmBuild(StrictModel):
    """SchedMD's release tarball and the nodes that build it (``slurm.source: build``)."""

    tarball: HttpUrl | None = live(
        None,
        "Where the control host fetches SchedMD's release tarball for versions.slurm (a site mirror's URL; it "
        "is used only once its sha256 is the known one). Omitted: the offline bundle's "
        "artifacts/<file name of gpuforge's table> (sources.bundle_dir). The same file from elsewhere is the "
        "same build: nothing on a node changes",
    )
    sha256: Sha256 | None = rebuild(
        None,
        "The tarball's sha256: needed for a release gpuforge's cited table (gpuforge.spec.slurm_tarballs) "
        "does not know; must equal the table's where it does. A change is another build of the same package "
        "version, which apt does not install over the nodes' packages: refused on a running cluster; move "
        "nodes to a new build with a new versions.slurm (gpuforge slurm-upgrade)",
    )
    hosts: list[Name] = live(
        min_length=1,
        description="Build hosts: one node per platform (OS release and architecture) of the Slurm nodes. Each "
        "gets the build dependencies (SchedMD's debian/control, libnvidia-ml-dev for NVML; on EL 9 slurm.spec's "
        "BuildRequires, with CodeReady Builder and EPEL) and builds the "
        "packages once; the result is cached on the control host by platform, version, digest and options (not "
        "by host: moving the build changes nothing on the nodes). The compile uses every core: a build host "
        "running Slurm job steps is refused (drain it first, or name nodes that run no jobs: controller, login, "
        "spare)",
    )
    nvml: bool = rebuild(
        False,
        "Build Slurm's NVML GPU plugin (gpu_nvml.so): a Debian build host needs Debian's non-free "
        "libnvidia-ml-dev, an EL one CUDA's nvml.h (rpmbuild --with nvml). Part of the cache key. "
        "A change is another build of the same package version, "
        "which apt does not install over the nodes' packages: refused on a running cluster; build the new "
        "options with a new versions.slurm (gpuforge slurm-upgrade)",
    )


class ResourceLimit(StrEnum):
    """A resource limit slurm.conf's PropagateResourceLimits(Except) names (slurm.conf(5))."""

    AS = "AS"
    CORE = "CORE"
    CPU = "CPU"
    DATA = "DATA"
    FSIZE = "FSIZE"
    MEMLOCK = "MEMLOCK"
    NOFILE = "NOFILE"
    NPROC = "NPROC"
    RSS = "RSS"
    STACK = "STACK"


class Slurm(StrictModel):
    """Slurm settings (only with cluster.scheduler: slurm)."""

    config_mode: ConfigMode = live(ConfigMode.PUSHED, "pushed (configs on every node) or configless")
    process_tracking: ProcessTracking = rolling(
        ProcessTracking.CGROUP, "cgroup (real clusters) or linuxproc (container labs: cgroups read-only)"
    )
    partitions: list[Partition] = live(min_length=1, description="Partitions")
    qos: list[Qos] = live(default_factory=list, description="QOS levels")
    accounts: list[Account] = live(default_factory=list, description="Fair-share accounts and users")
    users: list[UnixUser] = live(
        default_factory=list, description="Local Unix users made on every Slurm node (sites with LDAP: a site role)"
    )
    preempt_mode: PreemptMode = live(PreemptMode.REQUEUE, "Cluster PreemptMode (preempt/qos when not off)")
    accounting: Accounting = live(default_factory=Accounting, description="Accounting storage")
    priority: Priority = live(default_factory=Priority, description="Multifactor priority")
    health_check: HealthCheck = live(default_factory=HealthCheck, description="Node health check")
    cgroups: Cgroups = live(
        default_factory=Cgroups,
        description="cgroup.conf settings: slurmd restarts to read them (running jobs carry on, with their limits)",
    )
    mps: Mps = rolling(default_factory=Mps, description="MPS GRES")
    gpu_autodetect: GpuAutodetect = live(
        GpuAutodetect.AUTO,
        "gres.conf: nvml (AutoDetect=nvml; gpuforge installs slurm-wlm-nvml-plugin on GPU nodes: say so where the "
        "site's Slurm packages carry a plugin that installs with its slurmd), off (File=/dev/nvidiaN lines), or "
        "auto (nvml where the distribution's plugin installs with its Slurm, off elsewhere). MIG nodes need nvml",
    )
    containers: Containers = live(default_factory=Containers, description="enroot and pyxis")
    state_save_location: SlurmPath = rebuild(
        DEFAULT_STATE_DIR,
        "StateSaveLocation: slurmctld's state (every running and pending job). With two controllers it must "
        "be on a storage.mounts entry both controllers mount (slurm.conf(5)). Moving it loses the state "
        "unless copied: stop slurmctld, copy the directory, then apply --force",
    )
    failover: Failover = live(default_factory=Failover, description="SlurmctldTimeout and SlurmdTimeout")
    source: SlurmSource = rebuild(
        SlurmSource.DISTRO,
        "distro (the OS's Slurm packages), site (a repository the site configures, carrying packages built "
        "with SchedMD's own packaging: slurm-smd-* debs, slurm-* rpms) or build (gpuforge builds those packages "
        "from SchedMD's release tarball, slurm.build, and publishes them to the nodes as a signed repository). "
        "A change replaces every Slurm package "
        "of every node (the two packagings conflict): apply would install the other packages in no order "
        "(SchedMD's is slurmdbd, slurmctld, slurmd) and restart slurmctld and slurmd only where a file of theirs "
        "changed too; slurm-upgrade moves packages within one source. Refused on a running cluster: stop "
        "Slurm's daemons, then apply --force",
    )
    build: SlurmBuild | None = live(None, "SchedMD's tarball and build hosts (slurm.source: build only)")
    propagate_resource_limits_except: list[ResourceLimit] | None = live(
        None,
        "PropagateResourceLimitsExcept: limits of the submitting shell that job tasks do not inherit (they get "
        "slurmd's). Default: MEMLOCK where a compute group has an RDMA fabric (RDMA and MPI pin memory; a login "
        "shell's locked-memory limit, often 8 MB, fails their memory registration: Slurm FAQ, memlock), none "
        "elsewhere; [] propagates every limit (Slurm's default)",
    )
    extra_config: dict[str, str] = live(default_factory=dict, description="Extra slurm.conf parameters (escape hatch)")

    @field_validator("extra_config")
    @classmethod
    def _extra_config(cls, v: dict[str, str]) -> dict[str, str]:
        """Each key checked without regard to case: slurm.conf(5), DESCRIPTION, "The contents of the
        file are case insensitive except for the names of nodes and partitions" (``nodename=``
        declares a node as ``NodeName=`` does)."""
        for key, value in v.items():
            slurm_parameter(key, value)
        return v

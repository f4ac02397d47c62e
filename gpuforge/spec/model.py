"""The typed cluster spec (pydantic v2).

One YAML file describes a whole cluster: its nodes, their roles and hardware, pinned
stack versions, package sources and the scheduler (Slurm or Kubernetes). Every field
declares its update policy (see ``policy.py``); the generated JSON Schema carries it
as ``x-update-policy``. Field-level checks live here; rules that relate fields to each
other live in the ``*_rules.py`` modules, run together by ``rules.check_rules`` so that all problems
of a file are reported together.
"""

from __future__ import annotations

import re
from collections import Counter
from enum import StrEnum
from functools import cached_property
from typing import ClassVar, Literal

from pydantic import ConfigDict, field_validator, model_validator

from gpuforge.spec import hostlist
from gpuforge.spec.acceptance import Acceptance
from gpuforge.spec.bmc import Bmc
from gpuforge.spec.dcgm import dcgm_counter
from gpuforge.spec.digest_types import ArtifactFileName, Sha256
from gpuforge.spec.extensions import Site
from gpuforge.spec.fabric import Fabric
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.k8s_day2 import DEFAULT_VERSION as K8S_DEFAULT_VERSION
from gpuforge.spec.k8s_model import (
    BatchQueue as BatchQueue,
)
from gpuforge.spec.k8s_model import (
    Cni as Cni,
)
from gpuforge.spec.k8s_model import (
    GpuOperator as GpuOperator,
)
from gpuforge.spec.k8s_model import (
    Kubernetes as Kubernetes,
)
from gpuforge.spec.k8s_model import (  # the Kubernetes section, re-exported
    ManagedBy as ManagedBy,
)
from gpuforge.spec.k8s_model import (
    MigStrategy as MigStrategy,
)
from gpuforge.spec.k8s_model import (
    Tenant as Tenant,
)
from gpuforge.spec.openpgp import Fingerprint
from gpuforge.spec.patterns import DRIVER_VERSION as DRIVER_VERSION
from gpuforge.spec.patterns import SLURM_TIME as SLURM_TIME
from gpuforge.spec.patterns import VERSION as VERSION
from gpuforge.spec.platforms import Arch as Arch
from gpuforge.spec.platforms import OsFamily as OsFamily
from gpuforge.spec.policy import live, rebuild, rolling
from gpuforge.spec.provisioning import NodeBoot, Provisioning
from gpuforge.spec.slurm_model import (
    Account as Account,
)
from gpuforge.spec.slurm_model import (
    Accounting as Accounting,
)
from gpuforge.spec.slurm_model import (
    Cgroups as Cgroups,
)
from gpuforge.spec.slurm_model import (
    ConfigMode as ConfigMode,
)
from gpuforge.spec.slurm_model import (
    Containers as Containers,
)
from gpuforge.spec.slurm_model import (
    GpuAutodetect as GpuAutodetect,
)
from gpuforge.spec.slurm_model import (
    HealthCheck as HealthCheck,
)
from gpuforge.spec.slurm_model import (
    Mps as Mps,
)
from gpuforge.spec.slurm_model import (
    Partition as Partition,
)
from gpuforge.spec.slurm_model import (
    PreemptMode as PreemptMode,
)
from gpuforge.spec.slurm_model import (
    Priority as Priority,
)
from gpuforge.spec.slurm_model import (  # the Slurm section, re-exported
    ProcessTracking as ProcessTracking,
)
from gpuforge.spec.slurm_model import (
    Qos as Qos,
)
from gpuforge.spec.slurm_model import (
    Slurm as Slurm,
)
from gpuforge.spec.slurm_model import (
    UnixUser as UnixUser,
)
from gpuforge.spec.storage import Storage
from gpuforge.spec.strict import NAME as NAME
from gpuforge.spec.strict import Name, StrictModel
from gpuforge.spec.suggest import did_you_mean
from gpuforge.spec.types import (
    DnsName,
    EmailAddress,
    HostOrIp,
    HostPort,
    HttpUrl,
    IpAddress,
    Ipv4Start,
    LocalPath,
    MigProfileName,
    PlainText,
    PosixUser,
    RegistryRef,
    WebhookUrl,
    hostlist_expression,
)

# --------------------------------------------------------------------------- enums


class Scheduler(StrEnum):
    SLURM = "slurm"
    KUBERNETES = "kubernetes"


class Role(StrEnum):
    CONTROLLER = "controller"
    COMPUTE = "compute"
    LOGIN = "login"
    ACCOUNTING_DB = "accounting-db"
    MONITORING = "monitoring"
    K8S_CONTROL_PLANE = "k8s-control-plane"
    K8S_WORKER = "k8s-worker"
    STORAGE = "storage"


SLURM_ROLES = frozenset({Role.CONTROLLER, Role.COMPUTE, Role.LOGIN, Role.ACCOUNTING_DB})
K8S_ROLES = frozenset({Role.K8S_CONTROL_PLANE, Role.K8S_WORKER})
#: The roles a node may have under each scheduler (the other scheduler's roles are refused).
SCHEDULER_ROLES: dict[Scheduler, tuple[Role, ...]] = {
    Scheduler.SLURM: tuple(r for r in Role if r not in K8S_ROLES),
    Scheduler.KUBERNETES: tuple(r for r in Role if r not in SLURM_ROLES),
}


class SourceMode(StrEnum):
    UPSTREAM = "upstream"
    MIRROR = "mirror"
    OFFLINE = "offline"


class Connector(StrEnum):
    SSH = "ssh"
    VAGRANT = "vagrant"


# --------------------------------------------------------------------------- cluster


class Cluster(StrictModel):
    """Cluster identity and the scheduler it runs."""

    name: Name = rebuild(description="Cluster name (Slurm ClusterName, accounting cluster)")
    scheduler: Scheduler = rebuild(description="Workload manager: slurm or kubernetes")
    os: OsFamily = rebuild(OsFamily.DEBIAN12, "Default OS family of the nodes")
    domain: DnsName | None = live(None, "DNS domain appended in /etc/hosts entries")


class Ssh(StrictModel):
    """How gpuforge reaches nodes. Host-key checking is always on."""

    user: PosixUser = live("root", "SSH user (root, or one with passwordless sudo)")
    port: int = live(22, "SSH port", ge=1, le=65535)
    key: LocalPath | None = live(None, "Private key file on the control host")
    known_hosts: LocalPath | None = live(
        None, "known_hosts file used for strict host-key checking (default: the user's own)"
    )
    sudo: bool = live(False, "Use sudo for privileged commands (for a non-root user)")


class MirrorUrls(StrictModel):
    """Site mirrors of the upstream repositories, by kind."""

    debian: HttpUrl | None = live(None, "Debian archive mirror URL")
    ubuntu: HttpUrl | None = live(None, "Ubuntu archive mirror URL")
    nvidia_cuda: HttpUrl | None = live(
        None,
        "Mirror of NVIDIA's CUDA repository (driver, DCGM, fabric manager); {distro} and {arch} stand for "
        "NVIDIA's directory names (ubuntu2404, sbsa)",
    )
    nvidia_container: HttpUrl | None = live(None, "Mirror of NVIDIA's libnvidia-container repository")
    artifacts: HttpUrl | None = live(None, "Base URL serving release files (enroot, pyxis, dcgm-exporter)")
    epel: HttpUrl | None = live(
        None,
        "Mirror of EPEL 9 for RHEL nodes (dkms, enroot's parallel, slurm-devel), with RPM-GPG-KEY-EPEL-9 beside it",
    )
    docker_ce: HttpUrl | None = live(
        None,
        "Mirror of Docker's RHEL 9 repository (containerd.io, docker-ce for RHEL nodes: "
        "the directory with repodata/, Docker's 'gpg' key beside it)",
    )
    kubernetes: HttpUrl | None = live(
        None,
        "Mirror of pkgs.k8s.io (the Kubernetes community repositories) in the same layout: "
        "<url>/core:/stable:/v<minor>/deb/ or .../rpm/, with their signing keys",
    )
    doca: HttpUrl | None = live(
        None,
        "Mirror of NVIDIA's DOCA repository (fabric.stack: doca); {distro} and {arch} "
        "stand for DOCA's directory names (ubuntu24.04, arm64-sbsa)",
    )
    helm: HttpUrl | None = live(None, "Helm chart repository mirror")
    registry: RegistryRef | None = live(None, "Container registry mirror for images")


class MirrorKeys(StrictModel):
    """The keys site mirrors sign with, by primary key fingerprint (mode: mirror).

    A repository key served beside a mirror is used only when its fingerprint is the one pinned
    here, or upstream's own key's when nothing is pinned (a mirror that copies upstream's signed
    indexes as they are); a site that re-signs its mirror pins its own key's fingerprint.
    """

    nvidia_cuda: Fingerprint | None = live(None, "Key signing the nvidia_cuda mirror (default: NVIDIA's CUDA keys)")
    nvidia_container: Fingerprint | None = live(
        None, "Key signing the nvidia_container mirror (default: NVIDIA's libnvidia-container key)"
    )
    epel: Fingerprint | None = live(None, "Key signing the epel mirror's packages (default: Fedora's EPEL 9 key)")
    docker_ce: Fingerprint | None = live(
        None, "Key signing the docker_ce mirror's packages (default: Docker's RHEL key)"
    )
    kubernetes: Fingerprint | None = live(None, "Key signing the kubernetes mirror (default: the pkgs.k8s.io key)")


class Sources(StrictModel):
    """Where every package and artifact comes from."""

    mode: SourceMode = live(SourceMode.UPSTREAM, "upstream (default), mirror (site mirror) or offline (bundle)")
    apt_proxy: HttpUrl | None = live(None, "HTTP proxy for apt/dnf (e.g. an apt-cacher-ng site mirror)")
    apt_translations: bool = live(
        False,
        "Fetch apt's translated package descriptions (Acquire::Languages); off, every apt-get update on a "
        "Debian/Ubuntu node fetches and parses a third less",
    )
    mirrors: MirrorUrls = live(default_factory=MirrorUrls, description="Site mirror URLs (mode: mirror)")
    mirror_keys: MirrorKeys = live(
        default_factory=MirrorKeys,
        description="Fingerprints of the keys site mirrors sign with, when not upstream's (mode: mirror)",
    )
    artifact_sha256: dict[ArtifactFileName, Sha256] = live(
        default_factory=dict,
        description="sha256 of release files by file name (e.g. enroot_3.5.0-1_amd64.deb: <64 hex>), added to and "
        "overriding gpuforge's cited table: a release file whose sha256 is known from neither is never fetched "
        "(every mode; checked on the node before use and by 'gpuforge bundle')",
    )
    bundle_dir: LocalPath | None = live(
        None, "Offline bundle directory on the control host, made by 'gpuforge bundle' (mode: offline)"
    )
    bundle_fingerprint: Fingerprint | None = live(
        None,
        "Fingerprint of the offline bundle's signing key, as 'gpuforge bundle' printed it (mode: offline, "
        "required there): the bundle's manifest must be signed by this key, so a changed bundle cannot vouch "
        "for itself",
    )


# --------------------------------------------------------------------------- versions


class DriverFlavor(StrEnum):
    PROPRIETARY = "proprietary"
    OPEN = "open"


class DriverSource(StrEnum):
    DISTRO = "distro"
    NVIDIA = "nvidia"


class Driver(StrictModel):
    """The NVIDIA driver pin."""

    version: str = rolling(description="Exact driver version, e.g. 535.261.03", pattern=DRIVER_VERSION)
    flavor: DriverFlavor = rolling(DriverFlavor.PROPRIETARY, "Kernel modules: proprietary or open")
    source: DriverSource | None = rolling(
        None,
        "distro (Debian 12: non-free, branch 535 only; Ubuntu: Canonical's -server packages; RHEL: none) "
        "or nvidia (NVIDIA's CUDA repository); default: distro on Debian 12, nvidia elsewhere",
    )
    fabric_manager: str | None = rolling(
        None, "nvidia-fabricmanager version; defaults to, and must equal, the driver version", pattern=DRIVER_VERSION
    )

    @property
    def branch(self) -> str:
        return self.version.split(".")[0]


class Versions(StrictModel):
    """Every stack component, pinned."""

    driver: Driver | None = rolling(None, "NVIDIA driver; omit for nodes without GPUs only")
    cuda_toolkit: str | None = live(None, "CUDA toolkit version (e.g. 12.4), optional", pattern=r"^\d+\.\d+$")
    container_toolkit: str = live("1.20.0", "NVIDIA container toolkit (all four packages)", pattern=VERSION)
    enroot: str = live("4.1.2", "enroot release", pattern=VERSION)
    pyxis: str = rolling("0.24.0", "pyxis release (built against the installed Slurm)", pattern=VERSION)
    dcgm: str = live("4.6.0", "DCGM (datacenter-gpu-manager-4)", pattern=VERSION)
    dcgm_exporter: str = live("4.6.0-4.8.3", "dcgm-exporter release", pattern=VERSION)
    mig_manager: str = live(
        "0.15.0", "nvidia-mig-manager release (NVIDIA/mig-parted's .deb/.rpm release files)", pattern=VERSION
    )
    slurm: str = rolling(
        "distro",
        "Slurm: 'distro' (the OS's packages, as apt upgrades them) or the exact Debian/Ubuntu package version "
        "to install and hold (e.g. 22.05.8-4+deb12u3)",
        pattern=r"^(distro|[0-9][0-9A-Za-z.+~:_-]*)$",
    )
    kubernetes: str = rolling(
        K8S_DEFAULT_VERSION,
        "Kubernetes version: one minor at a time (kubeadm upgrade apply on the first control plane, upgrade node "
        "on the others one by one, then the workers batch by batch)",
        pattern=r"^\d+\.\d+\.\d+$",
    )
    gpu_operator: str = live("v26.7.0", "NVIDIA GPU Operator chart version", pattern=r"^v?\d+\.\d+\.\d+$")
    helm: str = live("4.2.4", "Helm version on the first control plane (installs the GPU Operator)",
                     pattern=r"^\d+\.\d+\.\d+$")  # fmt: skip


# --------------------------------------------------------------------------- nodes


class GpuHardware(StrictModel):
    """GPUs in each node of a group."""

    model: str = rolling(description=f"GPU model: one of {', '.join(GPU_MODELS)}")
    count: int = rolling(description="GPUs per node", ge=1, le=16)

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v not in GPU_MODELS:
            close = did_you_mean(v, GPU_MODELS, n=3)
            hint = f"; {close}" if close else ""
            raise ValueError(f"unknown GPU model {v!r}; known models: {', '.join(GPU_MODELS)}{hint}")
        return v


class Hardware(StrictModel):
    """What each node of a group has (Slurm NodeName line, GRES, checks).

    The CPU and memory figures are the node's, never a default: a Slurm compute group states all
    four, or says ``discover: true`` and takes them from ``gpuforge discover`` (``gpuforge.spec.
    discovered``); ``gpuforge.spec.hardware_rules`` refuses a group with neither. A figure counts as
    stated only when the file sets it (``model_fields_set``): the defaults below are placeholders
    for groups that run no slurmd.
    """

    gpu: GpuHardware | None = rolling(None, "GPUs per node; omit for CPU-only nodes")
    nvswitch: bool = rolling(False, "HGX/DGX board with NVSwitch (fabric manager needed)")
    discover: bool = rolling(
        False,
        "Take sockets, cores, threads and memory from the nodes: 'gpuforge discover SPEC' reads them "
        "and writes <spec>.hardware.json beside the spec (figures given here are replaced by it)",
    )
    sockets: int = rolling(1, "CPU sockets, as slurmd -C reports them (required for Slurm compute nodes)", ge=1, le=16)
    cores_per_socket: int = rolling(
        1, "Cores per socket, as slurmd -C reports them (required for Slurm compute nodes)", ge=1, le=512
    )
    threads_per_core: int = rolling(
        1, "Threads per core, as slurmd -C reports them (required for Slurm compute nodes)", ge=1, le=8
    )
    real_memory_mb: int = rolling(
        1024,
        "Memory given to Slurm (RealMemory), MiB: at most what slurmd -C reports, or Slurm marks the node "
        "INVALID (discovered nodes: their MemTotal less 2%; required for Slurm compute nodes)",
        ge=64,
    )

    #: The CPU and memory figures a Slurm NodeName line needs.
    FIGURES: ClassVar[tuple[str, ...]] = ("sockets", "cores_per_socket", "threads_per_core", "real_memory_mb")

    @property
    def missing_figures(self) -> list[str]:
        """The figures of :data:`FIGURES` the spec (or discovery) did not set."""
        return [f for f in self.FIGURES if f not in self.model_fields_set]

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def gpu_count(self) -> int:
        return self.gpu.count if self.gpu else 0


class NodeGroup(StrictModel):
    """Nodes that share roles and hardware."""

    name: Name = live(description="Group name (usable in partitions and queues)")
    hosts: str = live(description="Hostlist expression, e.g. gpu[001-064]")
    address_start: Ipv4Start | None = live(
        None,
        "First IPv4 address, the rest follow in order; with the node network's prefix when it is larger than a /24 "
        "(10.0.1.10/22): the range must stay inside that network",
    )
    addresses: list[IpAddress] | None = live(None, "Explicit addresses, one per host (IPv4 or IPv6, no zone ID)")
    roles: list[Role] = rebuild(description="Node roles", min_length=1)
    hardware: Hardware = rolling(default_factory=Hardware, description="Hardware of each node")
    os: OsFamily | None = rebuild(None, "OS family (default: cluster.os)")
    arch: Arch = rebuild(
        Arch.X86_64, "CPU architecture (uname -m): x86_64, or aarch64 (Grace: GH200, GB200, GB300 nodes)"
    )
    leaf_switch: str | dict[str, str] | None = live(
        None, "Leaf switch of every node, or {switch: hostlist} when the group spans switches"
    )
    mig_config: Name | None = rolling(None, "Name of a mig.configs entry applied to these nodes")
    connector: Connector = live(Connector.SSH, "ssh, or vagrant (addresses from 'vagrant ssh-config')")
    fabric: Fabric | None = rolling(None, "RDMA fabric (InfiniBand or RoCE), NCCL and MPI; omit for none")
    bmc: Bmc | None = live(None, "BMC of each node (power through Redfish or IPMI: gpuforge power); omit for none")
    boot: NodeBoot | None = live(
        None, "Network boot of the group's nodes (gpuforge provision; needs the provisioning section); omit for none"
    )

    @field_validator("hosts")
    @classmethod
    def _hostlist(cls, v: str) -> str:
        hostlist.expand(v)
        return v

    @field_validator("leaf_switch")
    @classmethod
    def _leaf_switch(cls, v: str | dict[str, str] | None) -> str | dict[str, str] | None:
        """A switch name, or switch names each with the hostlist of its nodes."""
        pairs: list[tuple[str, str | None]] = (
            list(v.items()) if isinstance(v, dict) else [] if v is None else [(v, None)]
        )
        for switch, expr in pairs:
            if not re.fullmatch(NAME, switch):
                raise ValueError(f"{switch!r} is not a switch name (lowercase letters, digits, '-', '_'; 63 at most)")
            if expr is not None:
                hostlist_expression(expr)
        return v

    @field_validator("roles")
    @classmethod
    def _unique_roles(cls, v: list[Role]) -> list[Role]:
        if len(set(v)) != len(v):
            raise ValueError("roles are listed more than once")
        return v

    @cached_property
    def hostnames(self) -> list[str]:
        return hostlist.expand(self.hosts)


class Switch(StrictModel):
    """A switch in the topology tree."""

    name: Name = live(description="Switch name")
    parent: Name | None = live(None, "Upper switch (spine); omit for the top")


class Topology(StrictModel):
    """Network topology for topology-aware placement (Slurm topology/tree)."""

    switches: list[Switch] = live(default_factory=list, description="Switches; leaves named by node groups")


class TimeSync(StrictModel):
    """Time synchronisation on the nodes."""

    enabled: bool = live(True, "Run chrony (off where the host keeps time, e.g. containers)")
    servers: list[HostOrIp] = live(default_factory=list, description="NTP servers (default: the distro's pool)")


# --------------------------------------------------------------------------- gpu stack


class ContainerEngine(StrEnum):
    CONTAINERD = "containerd"
    DOCKER = "docker"
    NONE = "none"


class ContainerRuntime(StrictModel):
    """The container engine and its NVIDIA runtime."""

    engine: ContainerEngine = rolling(ContainerEngine.CONTAINERD, "containerd, docker or none")
    nvidia_default: bool = live(
        False, "Make nvidia the default runtime (always on for Kubernetes nodes with the host toolkit)"
    )
    cdi: bool = live(True, "Generate the CDI spec (/etc/cdi/nvidia.yaml)")


class MigDevices(StrictModel):
    """One mig-parted entry: which GPUs, which MIG devices."""

    devices: Literal["all"] | list[int] = rolling("all", "GPU indices, or all")
    mig_enabled: bool = rolling(True, "MIG mode on these GPUs")
    mig_devices: dict[MigProfileName, int] = rolling(
        default_factory=dict, description="Profile -> count, e.g. 1g.10gb: 7"
    )


class Mig(StrictModel):
    """Named MIG layouts (mig-parted configs), referenced by node groups."""

    configs: dict[Name, list[MigDevices]] = rolling(
        default_factory=dict, description="Named layouts; a node group picks one with mig_config"
    )


class Dcgm(StrictModel):
    """DCGM and dcgm-exporter."""

    enabled: bool = live(True, "Install DCGM on GPU nodes")
    exporter: bool = live(True, "Run dcgm-exporter on GPU nodes")
    exporter_port: int = live(9400, "dcgm-exporter port", ge=1, le=65535)
    counters: list[str] | None = live(None, "DCGM fields to export (default: dcgm-exporter's default counters)")
    diag_level: Literal[0, 1, 2, 3, 4] = live(0, "dcgmi diag level run by 'gpuforge validate' (0 = off)")

    @field_validator("counters")
    @classmethod
    def _known_counters(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError("is empty; omit it for dcgm-exporter's default counters")
        for field in v or []:
            dcgm_counter(field)
        return v


PROM_DURATION = r"^\d+(ms|[smhdwy])$"


class AlertReceiver(StrictModel):
    """Where Alertmanager sends notifications: a webhook, e-mail, or both."""

    name: Name = live(description="Receiver name")
    webhook_url: WebhookUrl | None = live(None, "Webhook URL (Alertmanager webhook_configs)")
    email: EmailAddress | None = live(None, "E-mail address (needs monitoring.smtp_smarthost and smtp_from)")


class AlertLimits(StrictModel):
    """Thresholds of the alert rules rendered for Prometheus."""

    gpu_temp_c: int = live(87, "GPU temperature (DCGM_FI_DEV_GPU_TEMP, C) above which GpuTemperatureHigh fires", ge=1)
    gpu_power_w: int = live(700, "GPU power draw (DCGM_FI_DEV_POWER_USAGE, W) above which GpuPowerHigh fires", ge=1)
    xids: list[int] = live(
        default_factory=list,
        description="Xid codes alerted on besides the critical ones of gpuforge's Xid table "
        "(gpuforge/spec/xid_catalog.py: those that need a GPU reset, a node restart or an RMA)",
    )
    check_failing_minutes: int = live(10, "Minutes a gpuforge health check must fail before it alerts", ge=1)
    node_down_minutes: int = live(2, "Minutes a node-exporter target must be down before NodeDown fires", ge=1)
    disk_used_percent: int = live(90, "Used space (%) of /, /var and /var/lib/* above which DiskNearlyFull fires",
                                  ge=1, le=99)  # fmt: skip
    operator_reasons: list[PlainText] = live(
        default_factory=lambda: ["ops:", "maint"],
        description="Slurm drain/down reasons starting with one of these were set by an operator and do not alert "
        "(every other reason does, e.g. gpuforge's own 'gpuforge: health: ...')",
    )


class Monitoring(StrictModel):
    """Prometheus, node-exporter, Alertmanager, alert rules, the Slurm collector and dashboards."""

    prometheus: bool = live(False, "Run Prometheus on the monitoring node(s)")
    prometheus_port: int = live(9090, "Prometheus port", ge=1, le=65535)
    scrape_interval: str = live("30s", "Scrape interval", pattern=r"^\d+[smh]$")
    node_exporter: bool = live(True, "Run node-exporter on every node")
    node_exporter_port: int = live(9100, "node-exporter port", ge=1, le=65535)
    retention: str = live("15d", "Prometheus retention", pattern=r"^\d+[smhdwy]$")
    alertmanager: bool = live(True, "Run Alertmanager beside Prometheus (with prometheus: true)")
    alertmanager_port: int = live(9093, "Alertmanager port", ge=1, le=65535)
    receivers: list[AlertReceiver] = live(
        default_factory=list, description="Alert receivers; every alert goes to all of them"
    )
    smtp_smarthost: HostPort | None = live(None, "SMTP relay host:port for e-mail receivers")
    smtp_from: EmailAddress | None = live(None, "Sender address of alert e-mails")
    group_wait: str = live("30s", "Alertmanager group_wait", pattern=PROM_DURATION)
    group_interval: str = live("5m", "Alertmanager group_interval", pattern=PROM_DURATION)
    repeat_interval: str = live("4h", "Alertmanager repeat_interval", pattern=PROM_DURATION)
    alerts: AlertLimits = live(default_factory=AlertLimits, description="Alert thresholds")
    slurm_collector_interval: int = live(
        60, "Seconds between runs of the Slurm metrics collector on controller and accounting nodes", ge=10
    )
    grafana_datasource: PlainText = live("Prometheus", "Grafana datasource name the dashboards query")

    @field_validator("receivers")
    @classmethod
    def _receivers(cls, v: list[AlertReceiver]) -> list[AlertReceiver]:
        dup = sorted(n for n, uses in Counter(r.name for r in v).items() if uses > 1)
        if dup:
            raise ValueError(f"receiver names must be unique: {', '.join(dup)}")
        empty = [r.name for r in v if r.webhook_url is None and r.email is None]
        if empty:
            raise ValueError(f"receiver {empty[0]!r} has neither webhook_url nor email")
        return v

    @model_validator(mode="after")
    def _smtp(self) -> Monitoring:
        mailed = [r.name for r in self.receivers if r.email is not None]
        if mailed and not (self.smtp_smarthost and self.smtp_from):
            raise ValueError(f"receiver {mailed[0]!r} sends e-mail: set smtp_smarthost and smtp_from")
        return self


class Rollout(StrictModel):
    """How rolling changes proceed."""

    batch_size: int = live(1, "Nodes changed at once in a rolling change", ge=1)
    drain_timeout: int = live(3600, "Seconds to wait for running jobs when draining", ge=0)


# --------------------------------------------------------------------------- the spec


class Spec(StrictModel):
    """A whole GPU cluster."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        title="gpuforge cluster spec",
        json_schema_extra={"$id": "https://gpuforge.dev/schema/spec.json"},
    )

    cluster: Cluster = rebuild(description="Cluster identity and scheduler")
    ssh: Ssh = live(default_factory=Ssh, description="SSH connection defaults")
    sources: Sources = live(default_factory=Sources, description="Package and artifact sources")
    versions: Versions = live(default_factory=Versions, description="Pinned component versions")
    node_groups: list[NodeGroup] = live(min_length=1, description="Node groups")
    topology: Topology = live(default_factory=Topology, description="Switch tree")
    time_sync: TimeSync = live(default_factory=TimeSync, description="Time synchronisation")
    container_runtime: ContainerRuntime = rolling(
        default_factory=ContainerRuntime, description="Container engine and NVIDIA runtime"
    )
    slurm: Slurm | None = live(None, "Slurm (scheduler: slurm)")
    kubernetes: Kubernetes | None = live(None, "Kubernetes (scheduler: kubernetes)")
    mig: Mig = rolling(default_factory=Mig, description="MIG layouts")
    dcgm: Dcgm = live(default_factory=Dcgm, description="DCGM and dcgm-exporter")
    monitoring: Monitoring = live(default_factory=Monitoring, description="Monitoring")
    rollout: Rollout = live(default_factory=Rollout, description="Rolling change settings")
    site: Site = live(default_factory=Site, description="The site's own Ansible roles and testinfra checks")
    storage: Storage = live(default_factory=Storage, description="Shared storage: NFS exports and mounts")
    acceptance: Acceptance = live(default_factory=Acceptance, description="Acceptance campaigns (gpuforge accept)")
    provisioning: Provisioning | None = live(
        None, "Network boot from the control host: dnsmasq's DHCP/TFTP and iPXE (gpuforge provision); omit for none"
    )

    @model_validator(mode="before")
    @classmethod
    def _kubernetes_defaults(cls, data: object) -> object:
        """A Kubernetes cluster without a kubernetes section takes every default (each field has one)."""
        if isinstance(data, dict) and "kubernetes" not in data:
            cluster = data.get("cluster")
            if isinstance(cluster, dict) and cluster.get("scheduler") == "kubernetes":
                return {**data, "kubernetes": {}}
        return data

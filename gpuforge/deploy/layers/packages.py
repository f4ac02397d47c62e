"""Distro packages of all of a node's layers, installed in one apt transaction.

Each layer still declares (and checks) its own packages; installing their union up front
costs one dpkg run instead of one per layer, which is most of a first apply's time. It runs
right after the base layer, which sets the package proxy and the fixed service accounts, and after the
repository of gpuforge's Slurm build (``slurm.source: build``), whose packages it installs.
On an rpm node each layer installs its own packages with dnf; an EL node whose Slurm or monitoring
packages are EPEL's gets CodeReady Builder and EPEL enabled here first (:func:`el_repos_layer`).
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from gpuforge.deploy.context import node, secrets, spec
from gpuforge.deploy.converge import Layer, LayerFacts, Step, refresh_step
from gpuforge.deploy.layers.base import base_layer
from gpuforge.deploy.layers.monitoring import monitoring_layers
from gpuforge.deploy.layers.munge import munge_layer
from gpuforge.deploy.layers.nvidia.repos import epel_steps, rpm_key_step
from gpuforge.deploy.layers.slurm import accounting_layer, config_layer
from gpuforge.deploy.layers.slurm_repo import slurm_repo_layer
from gpuforge.deploy.layers.storage import server_layer
from gpuforge.deploy.nvidia_needs import Ctx
from gpuforge.deploy.operations.layer import converge, repair_packages
from gpuforge.deploy.runstate import RunState
from gpuforge.probes.nvidia_host import HostFacts
from gpuforge.render import nvidia_sources as src
from gpuforge.render.nvidia_repos import epel_wanted_early, nvidia_repo_files
from gpuforge.spec import Role, Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.storage import MountKind
from gpuforge.spec.storage_rules import mounts_of


def storage_packages(s: Spec, n: Node) -> tuple[str, ...]:
    """The NFS server's packages on the storage node, and the NFS client's where every node of ``n``'s
    group mounts an NFS share: what the group's nodes all need, so a baked image holds it too (the
    storage layers are per node; each still installs and checks its own)."""
    group = next(g for g in s.node_groups if g.name == n.group)
    client = all(any(m.kind is MountKind.NFS for m in mounts_of(s, h)) for h in group.hostnames)
    return server_layer(s, n).packages + (n.platform.distribution.nfs_client_packages if client else ())


def distro_packages(s: Spec, n: Node, host_name: str) -> list[str]:
    """Every Debian package the base, storage (:func:`storage_packages`), munge, Slurm and monitoring
    layers want on ``n``."""
    wanted = deploys_for(n)
    base = base_layer(s, n)
    layers = [base]
    if s.slurm is not None and "slurm" in wanted:
        sec = secrets()
        layers.append(munge_layer(sec))
        if n.has(Role.ACCOUNTING_DB) and s.slurm.accounting.enabled:
            layers.append(accounting_layer(s, sec, n.os.is_deb))
        layers.append(config_layer(s, n, sec, host_name, RunState()))  # read for its packages only
    layers.extend(monitoring_layers(s, n, "monitoring" in wanted))
    rest = (p for layer in layers[1:] for p in layer.packages)
    return list(dict.fromkeys([*base.packages, *storage_packages(s, n), *rest]))


def el_repos_layer(s: Spec, n: Node) -> Layer:
    """CodeReady Builder and EPEL on an EL node whose Slurm or monitoring packages are EPEL's, before munge,
    Slurm and monitoring install
    (the nvidia layers enable them later for what they need; an accounting-db node runs none of them).
    Upstream: Fedora's epel-release; mirror: the repo file and its checked key (the offline bundle's
    repository is pushed by the nvidia layers only)."""
    epel = src.epel_repo(s)
    if not epel_wanted_early(s, n) or epel.bundle is not None:
        return Layer.empty("el-repos")
    files = [f for f in nvidia_repo_files(s, n) if f.path == src.EPEL_REPO_FILE]
    keyed = epel.available and bool(epel.key_url) and epel.url != src.EPEL_RELEASE_RPM
    key_path = src.rpm_key_path(epel.kind)

    def after(facts: LayerFacts, changed: set[str]) -> list[Step]:
        ctx = Ctx(s, n, HostFacts(packages=dict(facts.packages)), host.name)
        steps = [rpm_key_step(ctx, epel)] if keyed and facts.contents.get(key_path) is None else []
        steps += epel_steps(ctx, epel, changed)
        if src.EPEL_REPO_FILE in changed:
            steps.append(refresh_step(True, "EPEL enabled"))
        return steps

    read = (key_path,) if keyed else ()
    return Layer("el-repos", early_files=files, watch_packages=("epel-release",), read_paths=read, after=after)


@deploy("gpuforge packages")
def packages() -> None:
    s, n = spec(), node()
    converge(name="packages: CodeReady Builder and EPEL (EPEL's Slurm and monitoring)", layer=el_repos_layer(s, n))
    names = distro_packages(s, n, host.name) if n.os.is_deb else []
    # Slurm built by gpuforge: its repository before the one transaction that installs its packages
    converge(name="packages: gpuforge's build of Slurm (repository)", layer=slurm_repo_layer(s, n))
    repair_packages(name="packages: repair an interrupted package run", packages=tuple(names))
    converge(
        name="packages: every layer's distro packages in one transaction",
        layer=Layer("packages", packages=tuple(names)) if names else Layer.empty("packages"),
    )

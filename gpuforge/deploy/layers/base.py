"""Base layer: /etc/hosts, the package proxy, fixed service accounts, the spec's Slurm users, time sync."""

from __future__ import annotations

from pyinfra.api import deploy

from gpuforge.deploy.context import node, spec
from gpuforge.deploy.converge import Account, Layer, LayerFacts, Service, Step, StepKind
from gpuforge.deploy.operations.layer import converge
from gpuforge.render.base import CHRONY_SOURCES, SERVICE_ACCOUNTS, base_files
from gpuforge.render.slurm import SLURM_PIN, slurm_version_pin
from gpuforge.spec import Spec
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for


def slurm_users(s: Spec, n: Node) -> tuple[Account, ...]:
    """The spec's local Unix users on every node that runs a Slurm daemon or client."""
    if s.slurm is None or "slurm" not in deploys_for(n):
        return ()
    return tuple(
        Account(u.name, u.uid, home=f"/home/{u.name}", gid=u.group_id, shell=u.shell, system=False)
        for u in s.slurm.users
    )


def base_layer(s: Spec, n: Node) -> Layer:
    files = base_files(s, n)
    early = [f for f in files if f.path.startswith("/etc/apt/")]
    rest = [f for f in files if f not in early]
    packages: tuple[str, ...] = ()
    services: tuple[Service, ...] = ()
    if s.time_sync.enabled:
        packages = ("chrony",)
        services = (Service("chrony", restart_on=(CHRONY_SOURCES,)),)
    accounts = tuple(Account(name, uid) for name, uid in SERVICE_ACCOUNTS.items()) + slurm_users(s, n)
    unpin = s.slurm is not None and n.os.is_deb and slurm_version_pin(s) is None

    def drop_stale_pin(facts: LayerFacts) -> list[Step]:
        if facts.contents.get(SLURM_PIN) is None:
            return []
        why = "versions.slurm is 'distro' now: apt may upgrade Slurm again"
        return [Step(StepKind.REMOVE, f"remove {SLURM_PIN} ({why})", f"rm -f {SLURM_PIN}")]

    return Layer(
        "base",
        packages=packages,
        early_files=early,
        accounts=accounts,
        files=rest,
        services=services,
        read_paths=(SLURM_PIN,) if unpin else (),
        before_files=drop_stale_pin if unpin else None,
    )


@deploy("gpuforge base")
def base() -> None:
    converge(name="base: hosts, proxy, accounts, time sync", layer=base_layer(spec(), node()))

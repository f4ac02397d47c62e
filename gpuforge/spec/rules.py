"""The registry of the rules that relate spec fields to each other.

Each rule is a small function ``(spec) -> iterable of SpecIssue``, kept in a module named for what it
rules on (``slurm_rules``, ``gpu_rules``, ``k8s_rules``, ``storage_rules``, ...); ``check_rules`` runs
all of them so that a user sees every problem of a file at once.

Invariant: :data:`RULES` is the one list of rules, in the order their issues are reported
(``tests/spec/test_rules_registry.py`` pins it); rule modules never import this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from gpuforge.spec.acceptance_rules import acceptance_rules
from gpuforge.spec.bmc_rules import bmc_rules
from gpuforge.spec.errors import SpecIssue
from gpuforge.spec.fabric_rules import fabric_rules
from gpuforge.spec.gpu_rules import dcgm_rules, gpu_driver_rules, mig_rules, platform_rules
from gpuforge.spec.hardware_rules import hardware_issues
from gpuforge.spec.k8s_rules import gpu_operator_rules, kubeadm_rules, kubernetes_day2_rules, kubernetes_rules
from gpuforge.spec.model import Connector, Spec
from gpuforge.spec.network_operator_rules import network_operator_rules
from gpuforge.spec.nodes import address_range_problem, group_addresses
from gpuforge.spec.provisioning_rules import provisioning_rules
from gpuforge.spec.site_rules import site_rules, source_rules
from gpuforge.spec.slurm_build_rules import slurm_build_rules
from gpuforge.spec.slurm_mix_rules import slurm_release_rules
from gpuforge.spec.slurm_parameters import slurm_parameter_rules
from gpuforge.spec.slurm_rules import (
    distro_slurm_cgroup,
    scheduler_sections_and_roles,
    slurm_gpu_rules,
    slurm_rules,
    topology_rules,
)
from gpuforge.spec.storage_rules import shared_state_rules, storage_rules

Rule = Callable[[Spec], Iterable[SpecIssue]]


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


RULES: tuple[Rule, ...] = (
    unique_names_and_addresses,
    scheduler_sections_and_roles,
    slurm_rules,
    distro_slurm_cgroup,
    slurm_gpu_rules,
    gpu_driver_rules,
    platform_rules,
    dcgm_rules,
    mig_rules,
    topology_rules,
    kubernetes_rules,
    kubeadm_rules,
    gpu_operator_rules,
    source_rules,
    site_rules,
    acceptance_rules,
    storage_rules,
    shared_state_rules,
    kubernetes_day2_rules,
    fabric_rules,
    network_operator_rules,
    hardware_issues,
    slurm_release_rules,
    slurm_parameter_rules,
    slurm_build_rules,
    bmc_rules,
    provisioning_rules,
)


def check_rules(spec: Spec) -> list[SpecIssue]:
    """Every cross-field problem of ``spec``."""
    issues: list[SpecIssue] = []
    for fn in RULES:
        issues.extend(fn(spec))
    return issues

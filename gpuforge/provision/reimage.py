"""``gpuforge provision SPEC --reimage --limit NODES``: what reimaging a node is, as data.

A reimage boots a running node into the spec's image again: (1) a Slurm compute node is drained
through the controller with :data:`REIMAGE_TAG` as its reason and waited on until no job runs on it
(jobs are never cancelled); (2) its BMC's boot override is set to PXE for the next boot only;
(3) it is power-cycled (powered on when off); (4) gpuforge waits until its SSH port answers with
a host key that is not one it had before (seen just before the cycle, or in known_hosts);
(5) what to do next is printed.

Why the host key and not ``/etc/gpuforge/image.json``: a baked image carries no SSH host key
(``gpuforge.image.strip``), so a node that booted the image has made fresh keys, and a key read
without logging in proves that a new boot answered, whatever state the old disk was in. Reading
the image record needs a login, which strict host-key checking refuses for exactly that new key
until the operator has checked it; so the record is left to ``gpuforge plan``/``apply`` after the
new key is trusted.

Everything here is pure: the nodes' input checks, the batches and each node's steps; the
executor is :mod:`gpuforge.provision.reimage_run`.

Invariants: a node is reimaged only when it is in the spec, has a boot MAC
(``node_groups[].boot.macs``) and a ``bmc`` section, and (in a Slurm cluster) is a compute node;
a Kubernetes cluster is refused (the pod check is not built). A node an operator drained (any
other reason) is never drained again, nor resumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpuforge.orchestrate.slurm_drain import NodeHold
from gpuforge.render import pxe
from gpuforge.spec import Role, Spec, nodes_with, resolve_nodes
from gpuforge.spec.cluster import Cluster

REIMAGE_TAG = "gpuforge: reimage"
"""The Slurm reason gpuforge drains a node with before it reimages it."""


class StepKind(StrEnum):
    DRAIN = "drain"
    BOOT = "boot-pxe"
    POWER = "power-cycle"
    WAIT = "wait-back"
    NEXT = "next"


@dataclass(frozen=True)
class Step:
    """One step of a node's reimage, as the plan prints it."""

    node: str
    kind: StepKind
    text: str


def input_issues(spec: Spec, names: list[str]) -> list[str]:
    """Why ``names`` cannot be reimaged, one line per problem naming the field (empty: they can)."""
    if spec.kubernetes is not None:
        return ["kubernetes: reimage of a Kubernetes node is not built (no check for running pods yet)"]
    if spec.provisioning is None:
        return ["provisioning: no provisioning section: nothing boots over the network"]
    booting = {n.name for n in pxe.boot_nodes(spec)}
    nodes = {n.name: n for n in resolve_nodes(spec)}
    group_index = {g.name: i for i, g in enumerate(spec.node_groups)}
    issues: list[str] = []
    for name in names:
        node = nodes[name]
        gi = group_index[node.group]
        group = spec.node_groups[gi]
        if name not in booting:
            issues.append(f"node_groups[{gi}].boot: {name} has no boot entry (boot section with its MAC in macs)")
        if group.bmc is None:
            issues.append(f"node_groups[{gi}].bmc: {name} has no BMC: gpuforge cannot set its boot or power")
        if spec.slurm is not None and not node.has(Role.COMPUTE):
            issues.append(f"node_groups[{gi}].roles: {name} is not a Slurm compute node: only those are reimaged")
    return issues


def controller(spec: Spec) -> str | None:
    """The node Slurm's commands run on (None: no Slurm, nothing to drain)."""
    ctl = nodes_with(spec, Role.CONTROLLER) if spec.slurm is not None else []
    return ctl[0].name if ctl else None


def batches(spec: Spec, names: list[str]) -> list[list[str]]:
    """``names`` in groups of ``rollout.batch_size`` (spec order): each group drained, booted and
    waited for together."""
    size = spec.rollout.batch_size
    return [names[i : i + size] for i in range(0, len(names), size)]


def split_holds(holds: dict[str, NodeHold]) -> tuple[list[str], list[str]]:
    """(nodes gpuforge drains, nodes an operator holds): a node already drained with
    :data:`REIMAGE_TAG` (an earlier reimage that stopped) is gpuforge's; any other hold is the operator's."""
    ours = [n for n, h in holds.items() if not h.held or h.reason.startswith(REIMAGE_TAG)]
    return ours, [n for n in holds if n not in ours]


def next_step(cluster: Cluster, node: str, ours: bool | None) -> str:
    """What the operator does after ``node`` came back (``ours``: gpuforge drained it; None: no Slurm)."""
    text = (
        f"check {node}'s new host key and put it in known_hosts (ssh-keygen -R, then add it), "
        f"then gpuforge apply {cluster.path} --limit {node}"
    )
    if ours is None:
        return text
    if ours:
        return f"{text}; then resume it: scontrol update NodeName={node} State=RESUME"
    return f"{text}; it stays drained: an operator drained it, gpuforge does not resume it"


def after_boot_text(cluster: Cluster, node: str) -> str:
    """What ``--accept-new-host-keys`` does once ``node`` is back."""
    return (
        f"record the host key it shows first in known_hosts (trust on first use), then gpuforge apply "
        f"{cluster.path} --limit {node} --include-drained, then gpuforge validate --limit {node}"
    )


def node_steps(cluster: Cluster, node: str, boot_timeout: int, accept_new_host_keys: bool = False) -> list[Step]:
    """The steps of ``node``'s reimage, in order."""
    spec = cluster.spec
    drain_timeout = spec.rollout.drain_timeout
    ctl = controller(spec)
    address = next(n.ssh_target for n in resolve_nodes(spec) if n.name == node)
    drain = (
        f"drain through {ctl} (Reason={REIMAGE_TAG!r}; a node an operator drained stays as it is) and wait "
        f"up to {drain_timeout} s until no job runs on it (jobs are never cancelled)"
    )
    wait = (
        f"wait up to {boot_timeout} s until SSH ({address}:{spec.ssh.port}) answers with a host key "
        "it did not have before the cycle"
    )
    resume = f"; then, if gpuforge drained it, resume it: scontrol update NodeName={node} State=RESUME"
    if accept_new_host_keys:
        resume = "; then, if this reimage drained it, gpuforge resumes it"
    steps = [Step(node, StepKind.DRAIN, drain)] if ctl is not None else []
    steps += [
        Step(node, StepKind.BOOT, "BMC boot override: PXE, next boot only"),
        Step(node, StepKind.POWER, "BMC power cycle (power on when off)"),
        Step(node, StepKind.WAIT, wait),
        Step(
            node,
            StepKind.NEXT,
            (after_boot_text(cluster, node) if accept_new_host_keys else next_step(cluster, node, None))
            + (resume if ctl is not None else ""),
        ),
    ]
    return steps


def plan_text(cluster: Cluster, names: list[str], boot_timeout: int, accept_new_host_keys: bool = False) -> str:
    """The plan ``--reimage`` prints without ``--yes``: the batches and each node's steps."""
    lines: list[str] = []
    for i, batch in enumerate(batches(cluster.spec, names), start=1):
        lines.append(f"batch {i}: {', '.join(batch)}")
        for node in batch:
            for step in node_steps(cluster, node, boot_timeout, accept_new_host_keys):
                lines.append(f"  {node}: {step.kind.value}: {step.text}")
    lines.append("nothing was changed: give --yes to reimage")
    return "\n".join(lines)

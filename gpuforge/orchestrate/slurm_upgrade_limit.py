"""``slurm-upgrade --limit`` and ``--plan``: what a limit means for SchedMD's ordered upgrade, and
the steps the upgrade would take, as text.

SchedMD's order is slurmdbd, then slurmctld, then slurmd (a daemon may talk to a newer one above
it, never to an older one). A limit narrows which nodes move now; it never reorders them:

- slurmdbd and slurmctld are never limited away silently: a limit that leaves one out while it is
  not at the target yet and selects a node below it (slurmctld below slurmdbd, slurmd below both)
  is refused, naming the daemon and its node; one already at the target is said to be left as is;
- every slurmctld is stopped, archived and upgraded together: a limit naming some controllers and
  not others is refused;
- the Slurm nodes a limit leaves out keep the running version and are named (``slurm-upgrade``
  again, with them, finishes the upgrade).
"""

from __future__ import annotations

from dataclasses import replace

from gpuforge.orchestrate.slurm_upgrade import UpgradePlan, UpgradeRefused, slurm_nodes
from gpuforge.spec import hostlist

ORDER = "SchedMD's order upgrades slurmdbd, then slurmctld, then slurmd"


def _refuse_misordered(plan: UpgradePlan, selected: set[str]) -> None:
    """:class:`UpgradeRefused` when the selection would move a daemon before the one above it."""
    pending = set(plan.pending)
    ctl_in = [c for c in plan.controllers if c in selected]
    ctl_out = [c for c in plan.controllers if c not in selected]
    if ctl_in and ctl_out:
        raise UpgradeRefused(
            f"--limit names the controller(s) {', '.join(ctl_in)} but not {', '.join(ctl_out)}: every slurmctld "
            "is stopped and upgraded together; name all of them or none"
        )
    dbd_behind = plan.dbd is not None and plan.dbd not in selected and plan.dbd in pending
    if ctl_in and dbd_behind:
        raise UpgradeRefused(
            f"--limit would upgrade slurmctld before slurmdbd on {plan.dbd} ({ORDER}): add {plan.dbd} to --limit"
        )
    below = [n for n in slurm_nodes(plan) if n in selected and n not in plan.controllers and n != plan.dbd]
    above = ([f"slurmdbd on {plan.dbd}"] if dbd_behind else []) + (
        [f"slurmctld on {', '.join(ctl_out)}"] if any(c in pending for c in ctl_out) else []
    )
    if below and above:
        first = ",".join(dict.fromkeys(n for n in [plan.dbd, *ctl_out] if n))
        raise UpgradeRefused(
            f"--limit would upgrade Slurm on {hostlist.compress(below)} before {' and '.join(above)} ({ORDER}): "
            f"add {first} to --limit, or upgrade them first with --limit {first}"
        )


def limit_upgrade(plan: UpgradePlan, selected: list[str], batch_size: int) -> tuple[UpgradePlan, list[str]]:
    """``plan`` narrowed to the ``selected`` nodes, and what that means, one line each; or
    :class:`UpgradeRefused` when the selection would break SchedMD's order (nothing changed)."""
    chosen = set(selected)
    _refuse_misordered(plan, chosen)
    everyone = slurm_nodes(plan)
    left = [n for n in everyone if n not in chosen]
    compute = [n for batch in plan.batches for n in batch if n in chosen]
    narrowed = replace(
        plan,
        batches=[compute[i : i + batch_size] for i in range(0, len(compute), batch_size)],
        others=[n for n in plan.others if n in chosen],
        pending=[n for n in plan.pending if n in chosen],
        left_out=left,
    )
    lines = []
    for daemon, nodes in (("slurmdbd", [plan.dbd] if plan.dbd else []), ("slurmctld", plan.controllers)):
        out = [n for n in nodes if n not in chosen and n not in plan.pending]
        if out:
            lines.append(f"--limit: {daemon} on {', '.join(out)} left as it is (already at {plan.version})")
    left = [n for n in left if n in plan.pending]
    if left:
        lines.append(
            f"--limit: {hostlist.compress(left)} keep Slurm {plan.running} for now; slurm-upgrade again with them "
            "finishes the upgrade"
        )
    return narrowed, lines


def upgrade_steps(plan: UpgradePlan, db: str | None) -> list[str]:
    """The steps ``run_upgrade`` takes for ``plan``, numbered, one line each (``--plan``)."""
    steps = []
    if plan.publish:
        steps.append(
            f"{hostlist.compress([n for n in slurm_nodes(plan) if n not in plan.left_out])}: put gpuforge's build of "
            f"Slurm {plan.version} in the apt sources (installs nothing, stops nothing)"
        )
    if plan.dbd is not None and plan.dbd not in plan.left_out:
        steps.append(
            f"{plan.dbd}: stop slurmdbd, dump database {db} under {plan.backup_dir} (read back whole), upgrade "
            f"slurmdbd's packages to {plan.version}, run slurmdbd in the foreground until its database conversion "
            "ends, start it under systemd"
        )
    if plan.controllers and not set(plan.controllers) & set(plan.left_out):
        steps.append(
            f"{', '.join(plan.controllers)}: stop slurmctld, archive StateSaveLocation under {plan.backup_dir}, "
            f"upgrade to {plan.version}, start slurmctld (primary first), wait for scontrol ping"
        )
    for i, batch in enumerate(plan.batches, 1):
        steps.append(
            f"compute batch {i}/{len(plan.batches)} {hostlist.compress(batch)}: stop slurmd, upgrade, start it "
            "(not drained: running jobs keep running), converge, wait until back in service"
        )
    if plan.others:
        steps.append(f"{hostlist.compress(plan.others)}: upgrade Slurm's packages, converge")
    return [f"{i}. {step}" for i, step in enumerate(steps, 1)]

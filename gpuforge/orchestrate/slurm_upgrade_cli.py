"""``gpuforge slurm-upgrade SPEC``: the Slurm upgrade flow (``slurm_upgrade``) over SSH.

``--plan`` prints the steps and changes nothing; ``--limit`` narrows the nodes without reordering
them (:mod:`gpuforge.orchestrate.slurm_upgrade_limit`). Exit status: 0 upgraded; 1 a step failed
(the message says what was done and where the backups are); 2 bad input, a refused jump or limit,
or a declined or impossible confirmation (nothing changed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Annotated

import typer

from gpuforge.orchestrate import remote, slurm_build
from gpuforge.orchestrate.slurm_upgrade import (
    UpgradeFailed,
    UpgradeIO,
    UpgradePlan,
    UpgradeRefused,
    plan_upgrade,
    run_upgrade,
)
from gpuforge.orchestrate.slurm_upgrade_limit import limit_upgrade, upgrade_steps
from gpuforge.spec import LIMIT_HELP, Spec, SpecError, load_or_exit, select_limit
from gpuforge.spec.cluster import Cluster


def io_for(cluster: Cluster) -> UpgradeIO:
    """The flow's connection to a real cluster: SSH (host keys checked) and gpuforge's deploys."""
    from gpuforge.orchestrate.apply import run_deploys

    def run(node: str, command: str, timeout: float) -> CompletedProcess[str]:
        return remote.run(cluster, node, command, timeout=timeout)

    def deploy(nodes: list[str]) -> dict[str, str]:
        result = run_deploys(cluster, ",".join(nodes), lambda m: print(m, file=sys.stderr))
        return {n: h.error or "failed" for n, h in result.hosts.items() if not h.ok}

    def publish(nodes: list[str]) -> dict[str, str]:
        return slurm_build.publish(cluster, nodes)

    return UpgradeIO(run=run, deploy=deploy, say=lambda m: print(m, file=sys.stderr, flush=True), publish=publish)


def upgrade_typer(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML)")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Upgrade without asking (needed without a terminal)")
    ] = False,
    show_plan: Annotated[
        bool, typer.Option("--plan", help="Print the steps the upgrade would take and exit; change nothing")
    ] = False,
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP + UPGRADE_LIMIT_HELP)] = None,
) -> None:
    """Upgrade Slurm to the spec's versions.slurm in SchedMD's order: database dump, slurmdbd (its
    conversion waited for), slurmctld, slurmd batch by batch with running jobs kept."""
    s = load_or_exit(spec)
    selected = _selected(s, limit)
    cluster = Cluster.of(s, spec)
    io = io_for(cluster)
    try:
        plan = plan_upgrade(s, io)
        notes: list[str] = []
        if selected is not None:
            plan, notes = limit_upgrade(plan, selected, s.rollout.batch_size)
    except UpgradeRefused as e:
        print(f"refused: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    if not plan.pending:
        where = "the selected Slurm nodes have" if selected is not None else "every Slurm node has"
        print(f"nothing to upgrade: {where} Slurm {plan.package}")
        return
    _show(plan, notes, s, slurm_build.planned_builds(cluster) if plan.publish else [])
    if show_plan:
        return
    if not yes:
        if not sys.stdin.isatty():
            print("pass --yes (-y) to upgrade without asking, or run it on a terminal", file=sys.stderr)
            raise typer.Exit(2)
        if input("Upgrade? [y/N] ").strip().lower() not in ("y", "yes"):
            raise typer.Exit(2)
    if plan.publish:
        try:  # before anything stops: a failed build changes nothing
            slurm_build.ensure_builds(cluster, lambda m: print(m, file=sys.stderr, flush=True))
        except slurm_build.SlurmBuildError as e:
            print(f"upgrade not started: {e}", file=sys.stderr)
            raise typer.Exit(1) from None
    try:
        run_upgrade(s, io, plan)
    except UpgradeFailed as e:
        print(f"upgrade failed: {e}", file=sys.stderr)
        raise typer.Exit(1) from None
    where = "on the selected nodes" if plan.left_out else "on every node"
    print(f"Slurm {plan.version} {where}; run 'gpuforge validate' (sacct keeps the jobs from before)")


UPGRADE_LIMIT_HELP = (
    "; slurmdbd and slurmctld go first (SchedMD's order): a limit that would upgrade slurmd before them is refused"
)


def _selected(spec: Spec, limit: str | None) -> list[str] | None:
    """``--limit``'s nodes (the shared selector), or exit 2 with its message; None: every node."""
    if not limit:
        return None
    try:
        return select_limit(spec, limit)
    except SpecError as e:
        print(e.format(), file=sys.stderr)
        raise typer.Exit(2) from None


def _show(plan: UpgradePlan, notes: list[str], spec: Spec, builds: list[str]) -> None:
    """The summary line, the builds it needs (``slurm.source: build``), what ``--limit`` means, and the
    numbered steps."""
    db = spec.slurm.accounting.database if spec.slurm is not None else None
    print(
        f"Slurm {plan.running} -> {plan.package} ({', '.join(plan.pending)} not there yet): dump under "
        f"{plan.backup_dir}; slurmdbd on {plan.dbd or '(none)'}; slurmctld on {', '.join(plan.controllers)}; "
        f"slurmd in {len(plan.batches)} batch(es); jobs keep running"
    )
    for line in [*builds, *notes, *upgrade_steps(plan, db)]:
        print(line)

"""``gpuforge slurm-upgrade SPEC``: the Slurm upgrade flow (``slurm_upgrade``) over SSH.

Exit status: 0 upgraded; 1 a step failed (the message says what was done and where the backups
are); 2 bad input, a refused jump, or a declined or impossible confirmation (nothing changed).
"""

from __future__ import annotations

import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Annotated

import typer

from gpuforge.orchestrate import remote
from gpuforge.orchestrate.slurm_upgrade import (
    UpgradeFailed,
    UpgradeIO,
    UpgradeRefused,
    plan_upgrade,
    run_upgrade,
)
from gpuforge.spec import Spec, SpecError, load_spec


def io_for(spec: Spec, spec_path: Path) -> UpgradeIO:
    """The flow's connection to a real cluster: SSH (host keys checked) and gpuforge's deploys."""
    from gpuforge.orchestrate.apply import run_deploys

    def run(node: str, command: str, timeout: float) -> CompletedProcess[str]:
        return remote.run(spec, spec_path, node, command, timeout=timeout)

    def deploy(nodes: list[str]) -> dict[str, str]:
        result = run_deploys(spec_path, ",".join(nodes), lambda m: print(m, file=sys.stderr))
        return {n: h.error or "failed" for n, h in result.hosts.items() if not h.ok}

    return UpgradeIO(run=run, deploy=deploy, say=lambda m: print(m, file=sys.stderr, flush=True))


def upgrade_typer(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML)")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Upgrade without asking (needed without a terminal)")
    ] = False,
) -> None:
    """Upgrade Slurm to the spec's versions.slurm in SchedMD's order: database dump, slurmdbd (its
    conversion waited for), slurmctld, slurmd batch by batch with running jobs kept."""
    try:
        s = load_spec(spec)
    except SpecError as e:
        print(e.format(), file=sys.stderr)
        raise typer.Exit(2) from None
    io = io_for(s, spec)
    try:
        plan = plan_upgrade(s, io)
    except UpgradeRefused as e:
        print(f"refused: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    if not plan.pending:
        print(f"nothing to upgrade: every Slurm node has Slurm {plan.package}")
        return
    print(
        f"Slurm {plan.running} -> {plan.package} ({', '.join(plan.pending)} not there yet): dump under "
        f"{plan.backup_dir}; slurmdbd on {plan.dbd or '(none)'}; slurmctld on {', '.join(plan.controllers)}; "
        f"slurmd in {len(plan.batches)} batch(es); jobs keep running"
    )
    if not yes:
        if not sys.stdin.isatty():
            print("pass --yes (-y) to upgrade without asking, or run it on a terminal", file=sys.stderr)
            raise typer.Exit(2)
        if input("Upgrade? [y/N] ").strip().lower() not in ("y", "yes"):
            raise typer.Exit(2)
    try:
        run_upgrade(s, io, plan)
    except UpgradeFailed as e:
        print(f"upgrade failed: {e}", file=sys.stderr)
        raise typer.Exit(1) from None
    print(f"Slurm {plan.version} on every node; run 'gpuforge validate' (sacct keeps the jobs from before)")

"""Mount units gpuforge wrote for a mount that has left the spec: found, unmounted, removed.

A node's units are read in the storage layer's one round trip (:data:`OWNED_READ`): every regular
file ``/etc/systemd/system/*.mount`` that carries gpuforge's mark (the managed-file header on its
first line and a ``Description=`` starting with ``render.storage.OWNED_DESCRIPTION``), with
systemd's active and enabled state. Those the spec no longer writes on the node are removed
(:func:`removal_steps`).

Invariants:
- Only marked units are touched: a site's own mount unit (no mark) is never stopped or removed.
- Only the unit is removed (``systemctl disable``, ``rm -f`` of the unit file, ``daemon-reload``):
  never the mount point nor anything on the filesystem it mounted.
- A mounted unit is stopped (unmounted) only where no job can be using it: on a node the rollout
  drained for this run (``drained``), or on a node that runs no jobs (no compute or Kubernetes
  worker role). On a node in service it is left mounted with a warning. A plan shows the stop as a
  ``rolling`` step (the rollout drains the node whose mount the spec removed: ``storage_changes``).
- A unit that is not mounted is removed wherever it is (nothing can be using it).
"""

from __future__ import annotations

import re
import shlex

from gpuforge.deploy.converge import Step, StepKind
from gpuforge.deploy.facts.layer import CommandRead
from gpuforge.render.files import header
from gpuforge.render.storage import OWNED_DESCRIPTION, UNIT_DIR

#: A unit name as gpuforge writes them (the spec's mount points need no escape) and systemd's escapes.
_UNIT = re.compile(r"[A-Za-z0-9:_.\\-]{1,255}\.mount")
#: ``systemctl is-active`` answers under which nothing is mounted.
NOT_MOUNTED = ("inactive", "failed")


def owned_units_command(unit_dir: str = UNIT_DIR) -> str:
    """One line per marked mount unit in ``unit_dir``: ``<unit> <is-active> <is-enabled>``."""
    first = shlex.quote(header().rstrip("\n"))
    mark = shlex.quote("^Description=" + OWNED_DESCRIPTION.replace(".", "[.]"))  # a basic regex
    return (
        f"for f in {shlex.quote(unit_dir)}/*.mount; do "
        '[ -f "$f" ] && [ ! -L "$f" ] || continue; '
        f'IFS= read -r first < "$f" && [ "$first" = {first} ] || continue; '
        f'grep -q {mark} "$f" || continue; '
        'u=${f##*/}; echo "$u $(systemctl is-active "$u") $(systemctl is-enabled "$u")"; '
        "done"
    )


#: The storage layer's read of its node's marked mount units (``LayerFacts.contents``).
OWNED_READ = CommandRead("storage-owned-mount-units", owned_units_command())


def parse_owned(text: str | None) -> dict[str, str]:
    """``{unit: active state}`` from :func:`owned_units_command`'s output; an empty state (systemctl
    did not answer) reads as ``unknown``, which is treated as mounted."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if parts and _UNIT.fullmatch(parts[0]):
            out[parts[0]] = parts[1] if len(parts) > 1 else "unknown"
    return out


def removal_steps(
    owned: dict[str, str],
    wanted: set[str],
    node: str,
    runs_jobs: bool,
    drained: bool,
    dry_run: bool,
    unit_dir: str = UNIT_DIR,
) -> list[Step]:
    """Steps that remove the ``owned`` units (unit -> active state) not in ``wanted`` (the unit
    names the spec writes on ``node``); see the module's invariants for when a mounted one stops."""
    steps: list[Step] = []
    for unit in sorted(u for u in owned if u not in wanted):
        path = f"{unit_dir}/{unit}"
        remove = f"systemctl disable {shlex.quote(unit)} && rm -f {shlex.quote(path)}"
        why = "its mount left the spec"
        if owned[unit] in NOT_MOUNTED:
            steps.append(Step(StepKind.REMOVE, f"remove {unit} ({why}; not mounted)", remove))
        elif not runs_jobs:
            steps.append(Step(StepKind.STOP, f"stop {unit} (unmount: {why})", f"systemctl stop {shlex.quote(unit)}"))
            steps.append(Step(StepKind.REMOVE, f"remove {unit} ({why})", remove))
        elif drained or dry_run:
            steps.append(
                Step(
                    StepKind.ROLLING,
                    f"stop and remove {unit} ({why}): on {node} drained by the rollout only",
                    f"systemctl stop {shlex.quote(unit)} && {remove}",
                )
            )
        else:
            steps.append(
                Step(
                    StepKind.WARNING,
                    f"{unit} is gpuforge's but {why}; still mounted on {node}, which is in service: left mounted. "
                    f"Stop it when no job uses it (systemctl stop {unit}); the next apply removes it",
                )
            )
    if any(s.command and "rm -f" in s.command for s in steps):
        steps.append(Step(StepKind.DAEMON_RELOAD, "systemctl daemon-reload", "systemctl daemon-reload"))
    return steps

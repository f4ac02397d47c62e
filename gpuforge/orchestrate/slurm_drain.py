"""Slurm's side of a rollout: read who took nodes out of service, drain, wait for jobs, resume.

Pure command builders and one parser; :mod:`gpuforge.orchestrate.node_hold` runs them on the
controller. Invariants:

- A node is drained with :data:`DRAIN_TAG` (or another ``gpuforge: ...`` reason a caller gives,
  such as a reimage's) only by :func:`drain_command`, and only nodes the caller owns are passed to
  it: a node an operator drained keeps its reason.
- The wait ends with success only when ``squeue`` itself answered and listed no job on the nodes;
  a failing ``squeue`` (controller down, timeout) never reads as "no jobs".
- :func:`resume_command` resumes a node only if its reason still starts with :data:`DRAIN_TAG` at
  that moment (an operator who re-drained it meanwhile with a reason of their own keeps it).

Commands and state names: Slurm's ``scontrol`` (``update NodeName= State=DRAIN|RESUME Reason=``),
``squeue -w`` (jobs allocated to the nodes) and ``sinfo -N -o`` (``%N`` node, ``%T`` state,
``%E`` reason), as their man pages (slurm.schedmd.com/scontrol.html, squeue.html, sinfo.html) say.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpuforge.spec import hostlist

DRAIN_TAG = "gpuforge: rolling change"
"""The reason gpuforge's rollouts drain with; the health check uses ``gpuforge: health: ...``."""

#: Words of ``sinfo``'s ``%T`` that mean the node was taken out of service (drained, draining,
#: down, failing, in maintenance), with or without its flag characters (``*`` not responding, ...).
OUT_OF_SERVICE = ("drain", "down", "fail", "maint")

#: Seconds between two ``squeue`` reads while waiting for a drained node's jobs.
POLL_S = 5.0


@dataclass(frozen=True)
class NodeHold:
    """A node's scheduler state as far as a rollout cares: out of service, and why."""

    name: str
    held: bool
    reason: str = ""

    @property
    def tagged(self) -> bool:
        """Drained with a gpuforge rollout's reason."""
        return self.held and self.reason.startswith(DRAIN_TAG)


def state_command(nodes: list[str]) -> str:
    """One ``sinfo`` line per node (and partition): ``name|state|reason``."""
    return f"sinfo -h -N -n {shlex.quote(hostlist.compress(nodes))} -o '%N|%T|%E'"


def parse_states(output: str) -> dict[str, NodeHold]:
    """``state_command``'s output by node (a node in several partitions is listed once per partition)."""
    holds: dict[str, NodeHold] = {}
    for line in output.splitlines():
        name, sep, rest = line.strip().partition("|")
        if not sep or name in holds:
            continue
        state, _, reason = rest.partition("|")
        held = any(word in state.lower() for word in OUT_OF_SERVICE)
        reason = reason.strip()
        holds[name] = NodeHold(name, held, "" if reason in ("none", "(null)") else reason)
    return holds


def drain_command(
    drain: list[str], wait: list[str], timeout_s: int, poll_s: float | None = None, reason: str = DRAIN_TAG
) -> str:
    """Drain ``drain`` (with ``reason``: a rollout's :data:`DRAIN_TAG` unless told), then wait until
    no job runs on ``drain`` + ``wait``.

    ``wait`` are nodes the caller may change but must not re-drain (an operator drained them and
    the run was given ``--include-drained``). Exit 0: no job left; 1: jobs still ran at the deadline
    (named on stderr) or ``squeue`` could not answer; the nodes stay drained either way.
    """
    every = drain + [n for n in wait if n not in drain]
    poll_s = POLL_S if poll_s is None else poll_s
    if not every:
        return "true"
    names = shlex.quote(hostlist.compress(every))
    parts = []
    if drain:
        parts.append(
            f"scontrol update NodeName={shlex.quote(hostlist.compress(drain))} State=DRAIN Reason={shlex.quote(reason)}"
        )
    parts.append(
        f"end=$(( $(date +%s) + {int(timeout_s)} )); "
        f"while :; do "
        f"jobs=$(squeue -h -w {names} -o '%i %N') || "
        f"{{ echo 'squeue failed: cannot tell whether jobs still run on '{names} >&2; exit 1; }}; "
        f'[ -z "$jobs" ] && exit 0; '
        f'[ "$(date +%s)" -ge "$end" ] && break; '
        f"sleep {poll_s:g}; "
        f"done; "
        f"echo 'jobs still running on '{names}' after {int(timeout_s)} s: '$(echo $jobs) >&2; exit 1"
    )
    return " && ".join(parts)


def resume_command(nodes: list[str], reason: str = DRAIN_TAG) -> str:
    """Resume each node whose reason still starts with ``reason`` (gpuforge's own: :data:`DRAIN_TAG`,
    a reimage's); say which were kept."""
    if not nodes:
        return "true"
    tag = shlex.quote(reason)
    names = " ".join(shlex.quote(n) for n in nodes)
    return (
        f"for n in {names}; do "
        f"r=$(sinfo -h -N -n \"$n\" -o '%E' | head -n 1); "
        f'case "$r" in {tag}*) scontrol update NodeName="$n" State=RESUME || exit 1 ;; '
        f'*) echo "$n kept drained: $r" >&2 ;; esac; '
        f"done"
    )

"""Change nodes batch by batch: drain, change, reboot if needed, validate, resume.

Invariants:
- A batch's nodes are changed (deployed, rebooted) only after their drain finished: Slurm said no
  job runs on them, or Kubernetes evicted their pods within their PodDisruptionBudgets.
- Only ``ours`` nodes (in service before the run, or drained by an earlier gpuforge run that the
  rollout record lists) are drained with gpuforge's mark and resumed. An operator's drained or
  cordoned node comes into a batch only with ``--include-drained`` (the caller's choice), keeps
  its state and reason, and is never resumed.
- The rollout record lists a node as drained by gpuforge before the drain command is sent and
  drops it only after the node was given back, so an interrupted run's next run resumes exactly
  those nodes.
- The first batch that fails stops the rollout, its nodes left drained; no later batch starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuforge.deploy.run import ApplyResult, HostResult
from gpuforge.deploy.runlog import RunLog, shown
from gpuforge.orchestrate import node_hold, node_lock, remote
from gpuforge.orchestrate.applied_record import RolloutRecord, save_rollout_record
from gpuforge.orchestrate.node_lock import NodeLocks
from gpuforge.orchestrate.slurm_drain import NodeHold
from gpuforge.spec import Spec, hostlist
from gpuforge.spec.cluster import Cluster

STOPPED = "node left drained; rollout stopped"
REBOOT_COMMAND = "rm -f /var/lib/gpuforge/reboot-required; systemctl reboot"
#: How long a node may take to go down after ``systemctl reboot``, and to answer SSH again.
REBOOT_DOWN_S, REBOOT_UP_S = 300, 900


@dataclass
class Rollout:
    """One run's rollout: its settings, its record, and how it deploys and validates nodes."""

    cluster: Cluster
    say: Callable[[str], None]
    allow_reboot: bool
    record: RolloutRecord
    deploy: Callable[[list[str]], ApplyResult]
    validate: Callable[[list[str]], dict[str, str]]
    log: RunLog | None = None
    """The apply's run log: drains, reboots and resumes are written to it."""

    @property
    def spec(self) -> Spec:
        return self.cluster.spec

    def save(self) -> None:
        save_rollout_record(self.cluster, self.record)

    def note(self, event: str, nodes: list[str], **fields: Any) -> None:
        """A line of the run log about whole nodes (a drain, a reboot, a resume)."""
        if self.log is not None:
            self.log.write(event, nodes=nodes or None, **fields)


def classify(holds: dict[str, NodeHold], record: RolloutRecord, nodes: list[str]) -> tuple[list[str], dict[str, str]]:
    """(nodes gpuforge may drain and give back, {node held by an operator: its reason}).

    A held node is gpuforge's only if it carries gpuforge's mark AND the record says gpuforge
    drained it; a node the record lists that an operator has since re-drained (another reason)
    or resumed is dropped from the record: the operator's decision stands.
    """
    ours: list[str] = []
    operator: dict[str, str] = {}
    for name in nodes:
        hold = holds.get(name, NodeHold(name, held=False))
        if not hold.held or (hold.tagged and name in record.drained):
            ours.append(name)
        else:
            operator[name] = hold.reason or "no reason given"
    record.drained = [n for n in record.drained if n not in nodes or (holds.get(n) and holds[n].tagged)]
    return ours, operator


def run_batches(
    ro: Rollout, batches: list[list[str]], operator: dict[str, str], result: ApplyResult, deployed: bool = False
) -> bool:
    """Roll ``batches`` in order (``deployed``: their change is already made, only reboots are
    left); False when one failed and the rollout stopped."""
    for i, batch in enumerate(batches, 1):
        ro.say(f"batch {i}/{len(batches)}: draining {hostlist.compress(batch)}")
        if not roll_batch(ro, batch, operator, result, deployed):
            return False
    return True


def roll_batch(ro: Rollout, batch: list[str], operator: dict[str, str], result: ApplyResult, deployed: bool) -> bool:
    """Drain, change, reboot if needed, validate, resume one batch (see the module's invariants),
    holding the batch's node locks from before the drain to after the resume: no other gpuforge
    run changes these nodes between the steps. A node another run holds stops the rollout."""
    locks = node_lock.take(ro.cluster, batch)
    try:
        if locks.refused:
            for name, why in locks.refused.items():
                _fail(result, [name], f"not changed: {why} (rollout stopped)")
            return False
        return _roll_locked(ro, batch, operator, result, deployed, locks)
    finally:
        locks.release()


def _roll_locked(
    ro: Rollout, batch: list[str], operator: dict[str, str], result: ApplyResult, deployed: bool, locks: NodeLocks
) -> bool:
    ours = [n for n in batch if n not in operator]
    included = [n for n in batch if n in operator]
    ro.record.drained += [n for n in ours if n not in ro.record.drained]
    ro.save()  # before the drain is sent: an interrupted run's next run gives these back
    error = node_hold.drain(ro.cluster, ours, included)
    ro.note("drain", batch, result="failed" if error else "ok", error=shown(error))
    if error:
        _fail(result, batch, f"drain: {error} ({STOPPED})")
        return False
    if not deployed:
        merge(result, ro.deploy(batch))
        failed = [n for n in batch if n not in result.hosts or not result.hosts[n].ok]
        if failed:
            _fail(result, failed, STOPPED)
            return False
    if not reboot_batch(ro, batch, result, locks):
        return False
    problems = ro.validate(batch)
    ro.note("validate", batch, result="failed" if problems else "ok", failures=problems or None)
    if problems:
        for name, text in problems.items():
            _fail(result, [name], f"{text} ({STOPPED})")
        return False
    error = node_hold.resume(ro.cluster, ours)
    ro.note("resume", ours, result="failed" if error else "ok", error=shown(error))
    if error:
        _fail(result, ours, f"resume: {error}")
        return False
    ro.record.drained = [n for n in ro.record.drained if n not in ours]
    ro.record.converged += [n for n in batch if n not in ro.record.converged]
    ro.save()  # a run interrupted in a later batch does not drain this one again
    return True


def reboot_batch(ro: Rollout, batch: list[str], result: ApplyResult, locks: NodeLocks) -> bool:
    """Reboot the batch's nodes whose change needs it (drained already), take their locks again
    (a reboot ends the lock's session), then converge them again; without ``allow_reboot`` they
    wait for an operator and the rollout stops."""
    needing = [n for n in batch if n in result.hosts and result.hosts[n].reboot_required]
    if not needing:
        return True
    if not ro.allow_reboot:
        for name in needing:
            why = "; ".join(result.hosts[name].reboot_required)
            result.waiting[name] = f"reboot required ({why}); left drained: apply --allow-reboot to reboot it"
        return False
    ro.say(f"rebooting {hostlist.compress(needing)}")
    ro.note("reboot", needing, command=REBOOT_COMMAND)
    for name in needing:
        remote.run(ro.cluster, name, REBOOT_COMMAND, timeout=30)  # the session ends with the node
    back = []
    for name in needing:
        gone = remote.wait_reachable(ro.cluster, name, up=False, timeout=REBOOT_DOWN_S)
        if gone and remote.wait_reachable(ro.cluster, name, up=True, timeout=REBOOT_UP_S):
            back.append(name)
        else:
            _fail(result, [name], f"did not come back within {REBOOT_UP_S // 60} minutes of a reboot ({STOPPED})")
    if len(back) < len(needing) or not _lock_again(ro, back, locks, result):
        return False
    merge(result, ro.deploy(back))  # what needed the new kernel module converges now
    still = [n for n in back if not result.hosts[n].ok or result.hosts[n].reboot_required]
    for name in still:
        host = result.hosts[name]
        if host.ok:
            _fail(result, [name], f"still needs a reboot after one: {'; '.join(host.reboot_required)} ({STOPPED})")
    return not still


def _lock_again(ro: Rollout, nodes: list[str], locks: NodeLocks, result: ApplyResult) -> bool:
    """Take the locks of rebooted nodes again (their old sessions ended with the reboot)."""
    for name in nodes:  # the reboot ended these sessions; make sure no stale one stays
        old = locks.held.pop(name, None)
        if old is not None:
            old.kill()
            old.wait()
    again = node_lock.take(ro.cluster, nodes)
    locks.held.update(again.held)
    for name, why in again.refused.items():
        _fail(result, [name], f"after its reboot: {why} ({STOPPED})")
    return not again.refused


def merge(result: ApplyResult, more: ApplyResult) -> None:
    """Add a later deploy run's host results to ``result`` (changes add up; the newest state wins)."""
    for name, host in more.hosts.items():
        before = result.hosts.get(name)
        if before is not None:
            host.changed = before.changed + host.changed
            host.unchanged += before.unchanged
        result.hosts[name] = host
    result.waiting.update(more.waiting)


def _fail(result: ApplyResult, nodes: list[str], error: str) -> None:
    for name in nodes:
        host = result.hosts.setdefault(name, HostResult(name))
        host.error = error if host.error is None else f"{host.error}; {error}"

"""The reimage executor: runs :mod:`gpuforge.provision.reimage`'s steps batch by batch through
injected transports (the Slurm controller's shell, each node's BMC, the host-key reads), so that
tests drive it with real commands against stand-ins.

Invariants:

* no BMC is asked anything for a batch until every node of it is drained (or an operator's hold)
  with no job, as the controller itself answers (``squeue`` listing none, then the day-2 rule of
  :mod:`gpuforge.bmc.day2` passing); a wait that ends with jobs still running stops the run, the
  nodes left drained, nothing cancelled;
* the boot override is set (PXE, next boot only) before the power cycle, once per node;
* a node is back only when its SSH port answers with a host key that is in none of the keys
  recorded for it before its cycle (read from it then, and from known_hosts);
* with :class:`AfterBoot` (``--accept-new-host-keys``), a batch that came back has its new keys
  recorded in known_hosts, then is converged (``gpuforge apply --limit``, drained nodes included),
  then validated (``gpuforge validate --limit``), and only then are the nodes gpuforge drained
  resumed (those whose reason is still the reimage's); a node an operator drained stays drained;
* every failure is a :class:`Stop` naming the node(s) and what to look at; later batches are not
  started.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gpuforge.bmc import day2
from gpuforge.bmc.redfish import BootDone, ResetDone
from gpuforge.bmc.redfish_facts import BootTarget, PowerAction
from gpuforge.bmc.targets import BmcTarget
from gpuforge.bmc.transport import BmcError
from gpuforge.orchestrate import slurm_drain
from gpuforge.orchestrate.node_hold import QUICK_TIMEOUT, parse_known
from gpuforge.provision import reimage
from gpuforge.spec import Spec, hostlist, resolve_nodes
from gpuforge.spec.cluster import Cluster


class BmcSystem(Protocol):
    """What the executor asks of a node's BMC (:class:`~gpuforge.bmc.redfish.RedfishSystem`, IPMI's)."""

    def set_boot(self, target: BootTarget, persistent: bool) -> BootDone: ...

    def act(self, action: PowerAction) -> ResetDone: ...


@dataclass(frozen=True)
class AfterBoot:
    """What follows a batch's return: its keys trusted, then ``gpuforge apply`` and ``validate`` of it
    (each given the batch's nodes; their exit status and output are judged here)."""

    trust: Callable[[str, int, set[str]], None]
    converge: Callable[[list[str]], subprocess.CompletedProcess[str]]
    validate: Callable[[list[str]], subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class Transports:
    """How the executor reaches things: the controller (command, timeout -> result), a BMC, keys."""

    controller: Callable[[str, float], subprocess.CompletedProcess[str]]
    system: Callable[[BmcTarget], BmcSystem]
    keys_now: Callable[[str, int], set[str]]
    keys_recorded: Callable[[str, int], set[str]]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    after: AfterBoot | None = None
    """None: the run stops when the nodes are back and prints the next steps."""


@dataclass(frozen=True)
class Timing:
    drain_timeout: int
    boot_timeout: float
    drain_poll: float = slurm_drain.POLL_S
    boot_poll: float = 5.0


class Stop(Exception):
    """A reimage that cannot go on; its text names the node(s) (exit 1)."""


@dataclass
class Outcome:
    """What a run did: the nodes back, and for each whether gpuforge drained it (None: no Slurm)."""

    back: list[str] = field(default_factory=list)
    ours: dict[str, bool | None] = field(default_factory=dict)


def _on_controller(tx: Transports, command: str, timeout: float) -> str:
    done = tx.controller(command, timeout)
    if done.returncode != 0:
        raise Stop(done.stderr.strip()[-500:] or f"exit status {done.returncode}")
    return done.stdout


def drain_batch(batch: list[str], tx: Transports, timing: Timing, say: Callable[[str], None]) -> dict[str, bool]:
    """Drain the batch (an operator's hold kept) and wait for its jobs; node -> gpuforge drained it."""
    names = hostlist.compress(batch)
    try:
        states = _on_controller(tx, slurm_drain.state_command(batch), QUICK_TIMEOUT)
    except Stop as e:
        raise Stop(f"{names}: cannot read their Slurm state: {e}; nothing was changed") from None
    holds = parse_known(slurm_drain.parse_states(states), batch)
    ours, operators = reimage.split_holds(holds)
    for n in operators:
        say(f"{n}: drained by an operator (reason {holds[n].reason or 'none'}): left so; waiting for its jobs")
    for n in ours:
        say(f"{n}: draining (Reason={reimage.REIMAGE_TAG!r}); waiting up to {timing.drain_timeout} s for its jobs")
    command = slurm_drain.drain_command(ours, operators, timing.drain_timeout, timing.drain_poll, reimage.REIMAGE_TAG)
    try:
        _on_controller(tx, command, timing.drain_timeout + 60)
    except Stop as e:
        raise Stop(f"{names}: {e}; left drained, no job cancelled, no BMC asked anything") from None
    try:
        out = _on_controller(tx, day2.slurm_command(batch), QUICK_TIMEOUT)
    except Stop as e:
        raise Stop(f"{names}: cannot read their Slurm state after the drain: {e}; left drained, no BMC asked") from None
    refused = day2.slurm_verdicts(batch, *day2.parse_slurm(out))
    if refused:
        why = "; ".join(f"{n}: {w}" for n, w in refused.items())
        raise Stop(f"{why}; left drained, no BMC asked anything")
    return {n: n in ours for n in batch}


def ssh_address(spec: Spec, node: str) -> tuple[str, int]:
    return next(n.ssh_target for n in resolve_nodes(spec) if n.name == node), spec.ssh.port


def boot_and_cycle(target: BmcTarget, tx: Transports, say: Callable[[str], None]) -> None:
    """PXE for the next boot, then the power cycle (on when off), as the BMC reads them back."""
    system = tx.system(target)
    try:
        boot = system.set_boot(BootTarget.PXE, False)
        after = f"{boot.after.boot_target} ({boot.after.boot_enabled})"
        say(
            f"{target.node}: boot override "
            + (f"{boot.sent} sent, reads back {after}" if boot.sent else f"already {after}")
        )
        reset = system.act(PowerAction.CYCLE)
    except BmcError as e:
        raise Stop(f"{target.node}: {e}") from None
    say(f"{target.node}: was {reset.before.power_state or 'unknown'}: {reset.reset_type} sent")


def wait_back(
    old: dict[str, set[str]], where: dict[str, tuple[str, int]], tx: Transports, timing: Timing,
    say: Callable[[str], None],
) -> dict[str, set[str]]:  # fmt: skip
    """Until every node of ``old`` answers SSH with a key not in its old keys, or the deadline;
    each node's new keys."""
    waiting = list(old)
    new: dict[str, set[str]] = {}
    deadline = tx.clock() + timing.boot_timeout
    while True:
        for n in list(waiting):
            keys = tx.keys_now(*where[n])
            if keys and not keys & old[n]:
                shown = sorted(keys)[0][:40]
                say(f"{n}: back: SSH {where[n][0]}:{where[n][1]} answers with a new host key ({shown}...)")
                waiting.remove(n)
                new[n] = keys
        if not waiting:
            return new
        if tx.clock() >= deadline:
            raise Stop(
                f"{hostlist.compress(waiting)}: did not come back within {timing.boot_timeout:g} s (SSH did not "
                "answer with a new host key): check its console through the BMC and the provisioning server's log"
            )
        tx.sleep(timing.boot_poll)


def run_batch(
    spec: Spec, batch: list[str], targets: dict[str, BmcTarget], tx: Transports, timing: Timing,
    say: Callable[[str], None],
) -> dict[str, bool | None]:  # fmt: skip
    """One batch: drain (Slurm), keys recorded, boot override and cycle per node, wait for all; then,
    with :class:`AfterBoot`, trust, converge, validate and resume (:func:`after_boot`)."""
    ours: dict[str, bool | None] = dict.fromkeys(batch)
    if reimage.controller(spec) is not None:
        ours.update(drain_batch(batch, tx, timing, say))
    where = {n: ssh_address(spec, n) for n in batch}
    old = {n: tx.keys_now(*where[n]) | tx.keys_recorded(*where[n]) for n in batch}
    for n in batch:
        boot_and_cycle(targets[n], tx, say)
    new = wait_back(old, where, tx, timing, say)
    if tx.after is not None:
        after_boot(tx.after, batch, ours, {n: (*where[n], new[n]) for n in batch}, tx, say)
    return ours


def _judged(done: subprocess.CompletedProcess[str], what: str, names: str) -> None:
    """A ``gpuforge`` step that did not exit 0 stops the run; the nodes stay drained."""
    if done.returncode != 0:
        tail = " | ".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-3:])[-600:]
        raise Stop(f"{names}: {what} exited {done.returncode}: {tail or 'no output'}; left drained, not resumed")


def after_boot(
    after: AfterBoot, batch: list[str], ours: dict[str, bool | None], keys: dict[str, tuple[str, int, set[str]]],
    tx: Transports, say: Callable[[str], None],
) -> None:  # fmt: skip
    """The batch back: keys trusted, converged, validated; then the nodes gpuforge drained resumed."""
    names = hostlist.compress(batch)
    for n in batch:
        host, port, new = keys[n]
        try:
            after.trust(host, port, new)
        except OSError as e:
            raise Stop(f"{n}: cannot record its new host key: {e}; left drained") from None
        say(f"{n}: its new host key is in known_hosts (the first key it showed after its power cycle)")
    say(f"{names}: gpuforge apply --limit {names} (drained nodes included)")
    _judged(after.converge(batch), "gpuforge apply", names)
    say(f"{names}: gpuforge validate --limit {names}")
    _judged(after.validate(batch), "gpuforge validate", names)
    mine = [n for n in batch if ours.get(n)]
    if mine:
        try:
            _on_controller(tx, slurm_drain.resume_command(mine, reimage.REIMAGE_TAG), QUICK_TIMEOUT)
        except Stop as e:
            raise Stop(f"{hostlist.compress(mine)}: converged and validated, but the resume failed: {e}") from None
        say(f"{hostlist.compress(mine)}: resumed (drained by this reimage)")
    for n in batch:
        if ours.get(n) is False:
            say(f"{n}: stays drained: an operator drained it, gpuforge does not resume it")


def run(
    cluster: Cluster, names: list[str], targets: dict[str, BmcTarget], tx: Transports, timing: Timing,
    say: Callable[[str], None],
) -> Outcome:  # fmt: skip
    """Every batch in turn; :class:`Stop` at the first failure (later batches untouched)."""
    spec, outcome = cluster.spec, Outcome()
    for batch in reimage.batches(spec, names):
        outcome.ours.update(run_batch(spec, batch, targets, tx, timing, say))
        outcome.back += batch
        if tx.after is None:
            for n in batch:
                say(f"{n}: next: {reimage.next_step(cluster, n, outcome.ours[n])}")
    return outcome

"""Upgrade Slurm in SchedMD's order, with running jobs kept: ``gpuforge slurm-upgrade``.

1. Read the running versions (``-V`` of each daemon) and the target (``versions.slurm``, or the
   version the accounting node's package manager offers for ``distro``); refuse a jump outside
   SchedMD's compatibility window or a downgrade (``gpuforge.spec.slurm_releases``). Which nodes
   are not at the target package version yet is read with dpkg (``slurm_settled``): another build
   of the running release (a Debian security update) is an upgrade too.
2. accounting-db: stop slurmdbd, dump the database under the state directory (checked to read back
   whole), upgrade its Slurm packages, start slurmdbd in the foreground as SlurmUser and wait for its
   database conversion however long it takes, showing the log's last line; then under systemd.
3. controllers: stop every slurmctld, archive StateSaveLocation, upgrade, start (primary first), wait
   until ``scontrol ping`` shows the primary up; then the accounting node and the controllers are
   converged by the deploys (what the new release changes in their files: the health check's
   expected version, for one), so the next ``apply`` finds nothing to do there.
4. compute nodes batch by batch (``rollout.batch_size``), never drained: slurmd stopped, upgraded,
   started (jobs keep running: their slurmstepd processes stay, as long as SlurmdTimeout is not
   reached); then the batch is converged by the deploys (pyxis rebuilt against the new Slurm, slurmd
   restarted for it) and must be back in service before the next batch.
5. every other Slurm node (login): upgraded and converged.

Any failure stops the flow where it is and says what is done, what is not and where the backups are.
Invariants: nothing is upgraded before the dump and the state archive exist and read back; slurmdbd
is never started under systemd before its conversion finished in the foreground; no node is drained.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from subprocess import CompletedProcess

from gpuforge.orchestrate import slurm_upgrade_commands as cmd
from gpuforge.orchestrate.slurm_settled import READ_TIMEOUT, read_settled
from gpuforge.orchestrate.slurm_upgrade_commands import UpgradePaths
from gpuforge.render.slurm import slurm_version_pin
from gpuforge.spec import Role, Spec, nodes_with, resolve_nodes
from gpuforge.spec.nodes import Node
from gpuforge.spec.roles import deploys_for
from gpuforge.spec.slurm_packages import SlurmSource
from gpuforge.spec.slurm_releases import upgrade_problem, upstream_of
from gpuforge.spec.storage_rules import mounts_of

Runner = Callable[[str, str, float], "CompletedProcess[str]"]
"""Runs a command on a node: (node, command, timeout) -> completed process (never raises)."""


class UpgradeRefused(Exception):
    """The upgrade cannot start (unsupported jump, unreadable versions); nothing was changed."""


class UpgradeFailed(Exception):
    """A step failed; the message says what was done and where the backups are."""


@dataclass
class UpgradeIO:
    """How the flow reaches the cluster (tests give stubs)."""

    run: Runner
    deploy: Callable[[list[str]], dict[str, str]]
    """Converge these nodes to the spec; failures by node."""
    say: Callable[[str], None]
    publish: Callable[[list[str]], dict[str, str]] | None = None
    """Put gpuforge's Slurm build in these nodes' apt sources (``slurm.source: build``); failures by node."""
    poll_s: float = 10.0
    paths: UpgradePaths = field(default_factory=UpgradePaths)
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))


@dataclass
class UpgradePlan:
    """What the upgrade does, decided before anything changes."""

    running: str
    target: str
    dbd: str | None
    controllers: list[str]
    batches: list[list[str]]
    others: list[str]
    backup_dir: str
    done: list[str] = field(default_factory=list)
    package: str = ""
    """The target package version (``versions.slurm``, or the candidate for ``distro``)."""
    pending: list[str] = field(default_factory=list)
    """Slurm nodes not all of whose Slurm packages are at ``package`` yet (read with dpkg: a new
    build of the same release counts, as a Debian security update does); none: nothing to do."""
    publish: bool = False
    """gpuforge builds this Slurm (``slurm.source: build``): its repository goes to the nodes first."""
    left_out: list[str] = field(default_factory=list)
    """Slurm nodes ``--limit`` leaves at the running version: their steps are skipped
    (:mod:`gpuforge.orchestrate.slurm_upgrade_limit` keeps SchedMD's order)."""

    @property
    def version(self) -> str:
        """What the messages call the target: the package version (the release when unknown)."""
        return self.package or self.target


def _ok(io: UpgradeIO, node: str, command: str, what: str, timeout: float = 600) -> str:
    cp = io.run(node, command, timeout)
    if cp.returncode != 0:
        raise UpgradeFailed(
            f"{what} on {node} failed (exit {cp.returncode}): {(cp.stderr or cp.stdout).strip()[-400:]}"
        )
    return cp.stdout


def backup_dir(spec: Spec, dbd: Node | None) -> str:
    """Where the dump goes: under StateSaveLocation when the accounting node has it (a controller, or
    a shared mount it mounts), else beside slurmdbd's own files."""
    assert spec.slurm is not None
    state = spec.slurm.state_save_location
    on_node = (
        dbd is None
        or dbd.has(Role.CONTROLLER)
        or any(state.startswith(m.path.rstrip("/") + "/") for m in mounts_of(spec, dbd.name))
    )
    return f"{state}/gpuforge-backup" if on_node else "/var/lib/slurm/gpuforge-backup"


def read_running(spec: Spec, io: UpgradeIO, target: str | None = None) -> str:
    """The one Slurm version the daemons run now; refused when they differ (an upgrade half done),
    unless that is what ``slurm-upgrade --limit`` leaves: each node on the old version or the
    ``target`` release, none above a node still on the old one in SchedMD's order (then: the old one)."""
    seen: dict[str, str] = {}
    for n in resolve_nodes(spec):
        if "slurm" in deploys_for(n):
            for daemon, version in cmd.parse_versions(
                _ok(io, n.name, cmd.versions_command(), "reading versions")
            ).items():
                seen[f"{daemon} on {n.name}"] = upstream_of(version)
    if not seen:
        raise UpgradeRefused("no Slurm daemon answered -V on the Slurm nodes: is Slurm installed (apply first)?")
    versions = set(seen.values())
    if len(versions) > 1 and not (target is not None and limited_before(spec, seen, target)):
        listed = ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
        raise UpgradeRefused(f"the nodes run different Slurm versions ({listed}): finish that upgrade first")
    return next(v for v in sorted(versions) if v != target) if len(versions) > 1 else versions.pop()


def limited_before(spec: Spec, seen: dict[str, str], target: str) -> bool:
    """Whether the versions ``seen`` ("<daemon> on <node>" -> version) are what an upgrade to
    ``target`` limited with ``--limit`` left: two versions, one of them ``target``, one per node,
    and no node upgraded below one that is not (accounting-db, then controllers, then the rest)."""
    per_node: dict[str, set[str]] = {}
    for key, version in seen.items():
        per_node.setdefault(key.rsplit(" on ", 1)[1], set()).add(version)
    if len(set(seen.values())) != 2 or target not in seen.values() or any(len(v) > 1 for v in per_node.values()):
        return False
    dbd = {n.name for n in nodes_with(spec, Role.ACCOUNTING_DB)}
    ctl = {n.name for n in nodes_with(spec, Role.CONTROLLER)}
    rank = {n: 0 if n in dbd else 1 if n in ctl else 2 for n in per_node}
    upgraded = [rank[n] for n, v in per_node.items() if target in v]
    behind = [rank[n] for n, v in per_node.items() if target not in v]
    controllers_split = any(rank[n] == 1 and target in v for n, v in per_node.items()) and 1 in behind
    return not controllers_split and max(upgraded) <= min(behind)  # behind: not empty (two versions)


def read_target(spec: Spec, io: UpgradeIO, probe: Node) -> str:
    """The target package version: ``versions.slurm``, or what ``probe``'s package manager offers."""
    pinned = slurm_version_pin(spec)
    if pinned:
        return pinned
    out = _ok(io, probe.name, cmd.candidate_command(spec, probe.os.is_deb), "reading the candidate version", 300)
    cand = next((x[len("__candidate=") :].strip() for x in out.splitlines() if x.startswith("__candidate=")), "")
    if not cand or cand == "(none)":
        raise UpgradeRefused(f"{probe.name}'s package manager offers no slurmdbd: check the Slurm repository")
    return cand


def read_pending(spec: Spec, io: UpgradeIO, package: str) -> list[str]:
    """Slurm nodes whose Slurm packages are not all at ``package`` (an RPM node always counts)."""
    nodes = [n.name for n in resolve_nodes(spec) if "slurm" in deploys_for(n)]
    pinned = spec.model_copy(update={"versions": spec.versions.model_copy(update={"slurm": package})})
    done = read_settled(pinned, nodes, lambda n, c: io.run(n, c, READ_TIMEOUT), need_slurmd=False)
    return [n for n in nodes if n not in done]


def plan_upgrade(spec: Spec, io: UpgradeIO) -> UpgradePlan:
    """Read the versions, check the jump, order the nodes; changes nothing."""
    if spec.slurm is None:
        raise UpgradeRefused("the spec has no slurm section")
    dbd = next(iter(nodes_with(spec, Role.ACCOUNTING_DB)), None) if spec.slurm.accounting.enabled else None
    controllers = nodes_with(spec, Role.CONTROLLER)
    package = read_target(spec, io, dbd or controllers[0])
    target = upstream_of(package)
    running = read_running(spec, io, target)
    if dbd is not None and dbd.has(Role.COMPUTE):
        raise UpgradeRefused(
            f"{dbd.name} runs slurmdbd and slurmd: its slurmd would stop for the whole database conversion (or "
            "run newer than slurmctld, which Slurm does not support); move accounting-db off compute nodes"
        )
    problem = upgrade_problem(running, target)
    if problem:
        raise UpgradeRefused(f"Slurm {running} -> {target} refused: {problem}")
    compute = [n.name for n in resolve_nodes(spec) if n.has(Role.COMPUTE) and not n.has(Role.CONTROLLER)]
    size = spec.rollout.batch_size
    placed = {*(c.name for c in controllers), *compute, *([dbd.name] if dbd else [])}
    others = [n.name for n in resolve_nodes(spec) if "slurm" in deploys_for(n) and n.name not in placed]
    return UpgradePlan(
        running, target, dbd.name if dbd else None, [c.name for c in controllers],
        [compute[i : i + size] for i in range(0, len(compute), size)], others, backup_dir(spec, dbd),
        package=package, pending=read_pending(spec, io, package), publish=spec.slurm.source is SlurmSource.BUILD,
    )  # fmt: skip


def _deb(spec: Spec, name: str) -> bool:
    return next(n for n in resolve_nodes(spec) if n.name == name).os.is_deb


def upgrade_dbd(spec: Spec, io: UpgradeIO, plan: UpgradePlan) -> None:
    """Stop, dump (checked), upgrade, convert in the foreground (progress shown), start under systemd."""
    assert spec.slurm is not None and plan.dbd is not None
    node = plan.dbd
    io.say(f"{node}: stopping slurmdbd")
    _ok(io, node, cmd.stop_command("slurmdbd"), "stopping slurmdbd")
    if node in plan.controllers:  # its packages move now: no daemon may run the old binaries over them
        io.say(f"{node}: stopping slurmctld until the controllers' turn (running jobs go on; none start)")
        _ok(io, node, cmd.stop_command("slurmctld"), "stopping slurmctld")
        plan.done.append(f"slurmctld on {node} stopped (started again in the controllers' turn)")
    db = spec.slurm.accounting.database
    out = _ok(io, node, cmd.dump_command(db, plan.backup_dir, plan.running, io.stamp), "the database dump", 24 * 3600)
    dump = next(x[len("__dump=") :] for x in out.splitlines() if x.startswith("__dump="))
    io.say(f"{node}: database {db} dumped and read back: {dump} bytes")
    plan.done.append(f"database dump {dump.split()[0]} on {node}")
    io.say(f"{node}: upgrading slurmdbd's packages to {plan.version}")
    _ok(io, node, cmd.install_command(spec, _deb(spec, node), io.paths), "upgrading slurmdbd", 3600)
    _ok(io, node, cmd.dbd_convert_start(io.paths), "starting slurmdbd in the foreground")
    wait_conversion(io, node)
    _ok(io, node, cmd.dbd_convert_finish(io.paths), "starting slurmdbd under systemd", 300)
    plan.done.append(f"slurmdbd {plan.version} on {node}")
    io.say(f"{node}: slurmdbd {plan.version} runs under systemd")


def wait_conversion(io: UpgradeIO, node: str) -> None:
    """Poll until slurmdbd listens (conversion done), however long; each poll shows the log's last line."""
    start = time.monotonic()
    while True:
        out = _ok(io, node, cmd.dbd_convert_poll(io.paths), "watching slurmdbd", 120)
        state = next((x[8:].strip() for x in out.splitlines() if x.startswith("__state=")), "")
        log = next((x[6:].strip() for x in out.splitlines() if x.startswith("__log=")), "")
        took = time.monotonic() - start
        if state == "listening":
            io.say(f"{node}: slurmdbd finished converting the database after {took:.0f} s")
            return
        if state != "running":
            raise UpgradeFailed(f"slurmdbd on {node} exited during its database conversion: {log or 'no log line'}")
        io.say(f"{node}: slurmdbd converting the database ({took:.0f} s): {log or '...'}")
        time.sleep(io.poll_s)


def upgrade_controllers(spec: Spec, io: UpgradeIO, plan: UpgradePlan) -> None:
    """Stop every slurmctld, archive the state (checked), upgrade, start in order, wait for the primary."""
    assert spec.slurm is not None
    computes = {n.name for n in resolve_nodes(spec) if n.has(Role.COMPUTE)}
    for node in plan.controllers:
        io.say(f"{node}: stopping slurmctld" + (" and slurmd" if node in computes else ""))
        _ok(io, node, cmd.stop_command("slurmctld"), "stopping slurmctld")
        if node in computes:
            _ok(io, node, cmd.stop_command("slurmd"), "stopping slurmd")
    first = plan.controllers[0]
    state = spec.slurm.state_save_location
    out = _ok(
        io, first, cmd.state_backup_command(state, plan.backup_dir, plan.running, io.stamp), "the state archive", 3600
    )
    archive = next(x[len("__state=") :] for x in out.splitlines() if x.startswith("__state="))
    plan.done.append(f"StateSaveLocation archive {archive.split()[0]} on {first}")
    io.say(f"{first}: {state} archived: {archive} bytes")
    for node in [c for c in plan.controllers if c != plan.dbd]:  # the accounting node's moved with slurmdbd
        io.say(f"{node}: upgrading slurmctld's packages to {plan.version}")
        _ok(io, node, cmd.install_command(spec, _deb(spec, node), io.paths), "upgrading slurmctld", 3600)
    for node in plan.controllers:
        _ok(io, node, "systemctl start slurmctld", "starting slurmctld", 300)
    for node in [c for c in plan.controllers if c in computes]:
        _ok(io, node, "systemctl start slurmd", "starting slurmd", 300)
    for _ in range(60):
        cp = io.run(first, "scontrol ping", 60)
        if f"Slurmctld(primary) at {first} is UP" in cp.stdout:
            break
        time.sleep(io.poll_s)
    else:
        raise UpgradeFailed(f"slurmctld on {first} did not answer scontrol ping after the upgrade")
    plan.done.append(f"slurmctld {plan.version} on {', '.join(plan.controllers)}")
    io.say(f"slurmctld {plan.version} answers on {first}")


def _converge(io: UpgradeIO, nodes: list[str]) -> None:
    """The deploys on ``nodes`` (none: nothing); any node that fails stops the upgrade, named."""
    failures = io.deploy(nodes) if nodes else {}
    if failures:
        raise UpgradeFailed("converging " + "; ".join(f"{n}: {why}" for n, why in sorted(failures.items())))


def upgrade_batch(spec: Spec, io: UpgradeIO, plan: UpgradePlan, batch: list[str]) -> None:
    """One batch of compute nodes, not drained: slurmd stopped, upgraded, started, converged, back in service."""
    for node in batch:
        script = f"( {cmd.stop_command('slurmd')} ) && ( {cmd.install_command(spec, _deb(spec, node), io.paths)} )"
        _ok(io, node, f"{script} && systemctl start slurmd", "upgrading slurmd", 3600)
    _converge(io, batch)
    ctl = plan.controllers[0]
    for _ in range(60):
        states = dict(
            line.split(None, 1)
            for line in io.run(ctl, cmd.nodes_state_command(batch), 60).stdout.splitlines()
            if " " in line
        )
        if all(n in states and not any(w in states[n] for w in ("down", "fail", "not_responding")) for n in batch):
            break
        time.sleep(io.poll_s)
    else:
        raise UpgradeFailed(f"{', '.join(batch)} did not come back in service after the upgrade")
    plan.done.append(f"slurmd {plan.version} on {', '.join(batch)}")
    io.say(f"slurmd {plan.version} on {', '.join(batch)} (running jobs kept)")


def converge_servers(io: UpgradeIO, plan: UpgradePlan) -> None:
    """The accounting node and the controllers the upgrade moved, converged to the spec (their daemons
    already run the new release; a lab run found the next apply rewriting the controller's health config)."""
    moved = [n for n in dict.fromkeys([*([plan.dbd] if plan.dbd else []), *plan.controllers]) if n not in plan.left_out]
    _converge(io, moved)
    if moved:
        plan.done.append(f"{', '.join(moved)} converged")


def slurm_nodes(plan: UpgradePlan) -> list[str]:
    """Every Slurm node the upgrade moves, in its order."""
    found = [*([plan.dbd] if plan.dbd else []), *plan.controllers]
    found += [n for batch in plan.batches for n in batch] + plan.others
    return list(dict.fromkeys(found))


def publish_build(io: UpgradeIO, plan: UpgradePlan) -> None:
    """gpuforge's build of the target in every moving node's apt sources, before any daemon stops."""
    moving = [n for n in slurm_nodes(plan) if n not in plan.left_out]
    if io.publish is None:
        raise UpgradeFailed("this run cannot send gpuforge's Slurm build to the nodes")
    failures = io.publish(moving)
    if failures:
        raise UpgradeFailed(
            "putting gpuforge's Slurm build in the nodes' apt sources: "
            + "; ".join(f"{n}: {why}" for n, why in sorted(failures.items()))
            + "; no daemon was stopped"
        )
    plan.done.append(f"gpuforge's build of Slurm {plan.version} in the apt sources of {', '.join(moving)}")
    io.say(f"gpuforge's build of Slurm {plan.version} is in the apt sources of {', '.join(moving)}")


def run_upgrade(spec: Spec, io: UpgradeIO, plan: UpgradePlan) -> UpgradePlan:
    """The whole flow in SchedMD's order; :class:`UpgradeFailed` names what was done before the failure."""
    try:
        if plan.publish:
            publish_build(io, plan)
        if plan.dbd is not None and plan.dbd not in plan.left_out:
            upgrade_dbd(spec, io, plan)
        if not set(plan.controllers) & set(plan.left_out):  # all of them or none (--limit)
            upgrade_controllers(spec, io, plan)
        converge_servers(io, plan)
        for i, batch in enumerate(plan.batches, 1):
            io.say(f"compute batch {i}/{len(plan.batches)}: {', '.join(batch)}")
            upgrade_batch(spec, io, plan, batch)
        for node in plan.others:
            _ok(io, node, cmd.install_command(spec, _deb(spec, node), io.paths), "upgrading Slurm's packages", 3600)
            plan.done.append(f"Slurm {plan.version} packages on {node}")
        _converge(io, plan.others)
    except UpgradeFailed as exc:
        done = "; ".join(plan.done) or "nothing"
        raise UpgradeFailed(f"{exc}. Done before it: {done}. Backups: {plan.backup_dir}") from None
    return plan

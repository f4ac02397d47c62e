"""Run the deploys against a spec's nodes with pyinfra's API.

One unreachable or failing node does not stop the others: it is reported, the rest
converge, and a re-run finishes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuforge.deploy.run import ApplyResult, HostResult, run_site
from gpuforge.deploy.runlog import RunLog, RunLogUnwritable, runs_dir, shown
from gpuforge.deploy.runstate import RunState
from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate import node_hold, node_lock
from gpuforge.orchestrate.applied_record import (
    RecordUnreadable,
    RolloutRecord,
    apply_lock,
    last_applied,
    load_rollout_record,
    record_applied,
    spec_text,
)
from gpuforge.orchestrate.batches import Rollout, classify, merge, run_batches
from gpuforge.orchestrate.k8s_remove import check_removal, run_removals
from gpuforge.orchestrate.k8s_upgrade import waiting_for_control_planes
from gpuforge.orchestrate.rollout import RolloutPlan, batch_nodes, plan_by_node, roll_every_node
from gpuforge.orchestrate.site_steps import run_with_site_steps
from gpuforge.orchestrate.slurm_build import ensure_builds
from gpuforge.orchestrate.slurm_settled import settle_upgraded
from gpuforge.spec import Spec, SpecError, SpecIssue, hostlist, resolve_nodes, select_limit
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.diff import FieldChange
from gpuforge.spec.layer_tags import LayerSelection
from gpuforge.spec.model import SourceMode


def preflight(cluster: Cluster) -> None:
    """Control-host checks before any host is touched (files the connection needs)."""
    spec, issues = cluster.spec, []
    for name, value in (("key", spec.ssh.key), ("known_hosts", spec.ssh.known_hosts)):
        if value and not os.access(os.path.expanduser(value), os.R_OK):
            hint = " (is the lab up? gpuforge lab up)" if "/gpuforge/lab/" in value else ""
            issues.append(SpecIssue(("ssh", name), f"file {value} does not exist or is not readable{hint}"))
    bundle = Path(spec.sources.bundle_dir).expanduser() if spec.sources.bundle_dir else None
    if bundle is not None and not bundle.is_dir():
        issues.append(SpecIssue(("sources", "bundle_dir"), f"directory {spec.sources.bundle_dir} does not exist"))
    elif bundle is not None and spec.sources.mode is SourceMode.OFFLINE:
        from gpuforge.bundle.verify import verify_bundle

        # Nothing unverified is pushed to a node; the bundle is trusted only through the pinned key.
        for problem in verify_bundle(bundle, spec.sources.bundle_fingerprint)[:10]:
            issues.append(SpecIssue(("sources", "bundle_dir"), f"bundle {spec.sources.bundle_dir}: {problem}"))
    if spec.site.ansible:
        from gpuforge.extensions.ansible_run import AnsibleMissing, ansible_playbook_binary

        try:
            ansible_playbook_binary()
        except AnsibleMissing as exc:
            issues.append(SpecIssue(("site", "ansible"), str(exc)))
    if issues:
        raise SpecError(issues, str(cluster.path))


class ApplyRefused(Exception):
    """The spec changes fields that cannot change on a running cluster."""

    def __init__(self, fields: list[FieldChange]) -> None:
        self.fields = fields
        lines = [f"  {f.path}: {f.old!r} -> {f.new!r}" for f in fields]
        super().__init__(
            "these fields need a rebuild and cannot change on a running cluster "
            "(apply --force to do it anyway):\n" + "\n".join(lines)
        )


class ApplyCancelled(Exception):
    """The operator did not confirm the apply; nothing was touched."""


@dataclass(frozen=True)
class ApplyOptions:
    """What the operator asked of one apply."""

    limit: str | None = None
    """Nodes to converge (``--limit``: hostlists, group and role names, ``!`` to leave out)."""
    force: bool = False
    """Apply rebuild-only fields anyway."""
    allow_reboot: bool = False
    """Reboot (drained) nodes whose change needs it, batch by batch."""
    include_drained: bool = False
    """Also change nodes an operator drained or cordoned (they stay drained; never resumed)."""
    layers: LayerSelection | None = None
    """``--tags``/``--skip-tags``: only these layers, and only on nodes with no rolling change
    pending (:func:`_apply_tagged`); None: every layer, the whole rollout."""


@dataclass(frozen=True)
class ApplyPreview:
    """What an apply is about to do, shown for confirmation before anything is touched."""

    spec: Spec
    nodes: list[str]
    """The selected nodes (``--limit``)."""
    rolling_fields: list[str]
    to_roll: list[str]
    """Nodes to be drained and changed batch by batch (an operator's drained ones wait unless
    ``--include-drained``)."""
    held_back: dict[str, str]
    """A run with ``--tags``/``--skip-tags``: nodes left alone, with why."""
    layers: LayerSelection | None


def apply(
    cluster: Cluster,
    limit: str | None = None,
    on_event: Callable[[str], None] | None = None,
    force: bool = False,
    allow_reboot: bool = False,
    include_drained: bool = False,
    layers: LayerSelection | None = None,
    confirm: Callable[[ApplyPreview], bool] | None = None,
) -> ApplyResult:
    """Converge every node (or those in ``limit``) to the spec, never under running work.

    Changes are applied by the update policy of the fields they touch, compared per node with the
    spec that node last converged to: ``live`` at once, ``rolling`` batch by batch with a drain
    (``--limit`` narrows which nodes roll, it never skips the roll), ``rebuild`` refused unless
    ``force``; ``versions.slurm`` rolls no node that already runs it (after ``gpuforge slurm-upgrade``:
    :mod:`gpuforge.orchestrate.slurm_settled`). Nodes an operator drained are left alone unless
    ``include_drained``; nodes that need a reboot are rebooted drained with ``allow_reboot``, else
    reported in ``waiting``. Two applies of one spec file never run at once: the second is refused
    (:class:`gpuforge.orchestrate.applied_record.ApplyLocked`) before anything is touched.
    ``layers`` (``--tags``) narrows the run to some layers (:func:`_apply_tagged`). ``confirm``
    sees what the apply is about to do, under the apply lock and before anything is touched;
    False raises :class:`ApplyCancelled`. Every apply writes a run log (``gpuforge.deploy.runlog``).
    """
    options = ApplyOptions(limit, force, allow_reboot, include_drained, layers)
    with apply_lock(cluster):
        return _apply_locked(cluster, options, on_event or (lambda _msg: None), confirm)


def _rollout_plan(
    cluster: Cluster, record: RolloutRecord, force: bool, say: Callable[[str], None]
) -> tuple[RolloutPlan, Spec | None]:
    """What rolls, per node, and the last applied spec: nodes the record says converged to a newer
    spec are diffed against it (an unreadable record with ``force``: every node rolls, None)."""
    spec = cluster.spec
    try:
        applied = last_applied(cluster)
    except RecordUnreadable as exc:
        if not force:
            raise  # fail closed: never everywhere at once when the change is unknown
        say(f"{exc.path} unreadable: --force rolls every node batch by batch")
        return roll_every_node(spec), None
    newer = record.converged_spec()
    everyone = [n.name for n in resolve_nodes(spec)]
    if newer is None:
        return plan_by_node([(applied, everyone)], spec), applied
    ahead = [n for n in everyone if n in record.converged]
    return plan_by_node([(newer, ahead), (applied, [n for n in everyone if n not in ahead])], spec), applied


def _apply_locked(
    cluster: Cluster,
    options: ApplyOptions,
    say: Callable[[str], None],
    confirm: Callable[[ApplyPreview], bool] | None,
) -> ApplyResult:
    spec = cluster.spec
    everyone = [n.name for n in resolve_nodes(spec)]
    selected = select_limit(spec, options.limit) if options.limit else everyone
    record, problem = load_rollout_record(cluster)
    if problem:
        say(problem)
    rollout, last = _rollout_plan(cluster, record, options.force, say)
    if rollout.refused and not options.force:
        raise ApplyRefused(rollout.refused)
    settle_upgraded(cluster, rollout, say)  # nodes slurm-upgrade moved: not drained again
    applied = None if rollout.unknown_change else last
    check_removal(applied, spec, options.force)  # before anything is touched
    leftover = [n for n in record.drained if n in selected and n not in rollout.rolling_nodes]
    to_roll = [n for n in everyone if n in selected and (n in rollout.rolling_nodes or n in leftover)]
    converged = record.converged if record.spec == spec_text(spec) else []
    behind = waiting_for_control_planes(spec, rollout.rolling, to_roll, converged)
    to_roll = [n for n in to_roll if n not in behind]
    selected = [n for n in selected if n not in behind]
    held = held_back(rollout, to_roll, leftover) if options.layers is not None else {}
    held.update(behind)
    fields = sorted({c.path for c in rollout.rolling})
    preview = ApplyPreview(spec, selected, fields, [n for n in to_roll if n not in held], held, options.layers)
    if confirm is not None and not confirm(preview):
        raise ApplyCancelled()
    log = open_run_log(cluster, options, selected)
    try:
        ensure_builds(cluster, say)  # slurm.source: build; a failure stops here, no node converged
        if options.layers is not None:
            result = _apply_tagged(cluster, options, say, preview, log)
        else:
            plan = (record, rollout, everyone, selected, to_roll, applied)
            result = _apply_all(cluster, options, say, plan, log)
        result.waiting.update(behind)
        log_outcome(log, result)
        return result
    except BaseException as exc:
        log.write("end", ok=False, error=shown(f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        log.close()


def _apply_all(
    cluster: Cluster,
    options: ApplyOptions,
    say: Callable[[str], None],
    plan: tuple[RolloutRecord, RolloutPlan, list[str], list[str], list[str], Spec | None],
    log: RunLog,
) -> ApplyResult:
    """Every layer: Kubernetes nodes the spec dropped leave the cluster first (the first failure
    stops the apply), then live changes at once, rolling ones batch by batch, progress recorded."""
    spec = cluster.spec
    record, rollout, everyone, selected, to_roll, applied = plan
    gone = run_removals(applied, cluster) if applied is not None else {}
    if gone:
        return ApplyResult({n: HostResult(n, error=why) for n, why in gone.items()})
    if record.spec != spec_text(spec):
        record.spec, record.converged = spec_text(spec), []
    ro = Rollout(
        cluster, say, options.allow_reboot, record,
        deploy=lambda names: run_deploys(cluster, ",".join(names), say, locked=True, run=new_run(log, drained=names)),
        validate=lambda names: validate_nodes(cluster, names),
        log=log,
    )  # fmt: skip
    result = ApplyResult({})
    rolling, operator = _hold_check(ro, to_roll, options.include_drained, result)
    others = [n for n in selected if n not in to_roll]
    if others:
        merge(result, run_deploys(cluster, ",".join(others), say, run=new_run(log)))
    if rolling:
        fields = ", ".join(sorted({c.path for c in rollout.rolling})) or "nodes an interrupted rollout left drained"
        say(f"rolling change ({fields}) on {hostlist.compress(rolling)}")
        if not run_batches(ro, batch_nodes(spec, rolling), operator, result):
            _record_progress(ro, result, everyone)
            return result
    _reboot_others(ro, [n for n in others if n in result.hosts], options.include_drained, result)
    _record_progress(ro, result, everyone)
    return result


def held_back(rollout: RolloutPlan, to_roll: list[str], leftover: list[str]) -> dict[str, str]:
    """A run with ``--tags``/``--skip-tags``: the nodes it leaves alone, with why. A node with a
    rolling change pending (or left drained by an interrupted rollout) is only ever changed by a
    full apply, drained: a layer skipped here could hold its change."""
    fields = ", ".join(sorted({c.path for c in rollout.rolling})) or "every field: what changed is unknown"
    out = {}
    for name in to_roll:
        if name in leftover:
            out[name] = "left drained by an interrupted rollout: apply without --tags/--skip-tags finishes it"
        else:
            out[name] = (
                f"a rolling change ({fields}) is pending: left alone; apply without --tags/--skip-tags rolls it "
                "(drained batch by batch)"
            )
    return out


def _apply_tagged(
    cluster: Cluster,
    options: ApplyOptions,
    say: Callable[[str], None],
    preview: ApplyPreview,
    log: RunLog,
) -> ApplyResult:
    """``--tags``/``--skip-tags``: the chosen layers on the selected nodes that have no rolling
    change pending. Such a run never drains, reboots or resumes a node, and records nothing: the
    applied spec and the rollout record stay as they were, so the next full apply compares with
    the last full one and rolls what is still pending (a layer skipped here runs then)."""
    assert options.layers is not None
    result = ApplyResult({}, waiting=dict(preview.held_back))
    go = [n for n in preview.nodes if n not in preview.held_back]
    if go:
        say(f"only {options.layers.describe()} (--tags/--skip-tags) on {hostlist.compress(go)}")
        merge(result, run_deploys(cluster, ",".join(go), say, run=new_run(log, options.layers)))
    for name in go:
        host = result.hosts.get(name)
        if host is not None and host.ok and host.reboot_required:
            why = "; ".join(host.reboot_required)
            result.waiting[name] = (
                f"reboot required ({why}): apply without --tags/--skip-tags, with --allow-reboot, reboots it (drained)"
            )
    return result


def new_run(log: RunLog | None, layers: LayerSelection | None = None, drained: list[str] | None = None) -> RunState:
    """A fresh RunState for one deploy run of an apply: its run log, the chosen layers, and the
    nodes a rollout batch holds drained."""
    if layers is None:
        return RunState(runlog=log, drained=frozenset(drained or ()))
    return RunState(layers=layers.layers, site_steps=layers.site_steps, runlog=log)


def open_run_log(cluster: Cluster, options: ApplyOptions, selected: list[str]) -> RunLog:
    """The apply's run log, its ``run`` line written; :class:`RunLogUnwritable` when it cannot be made
    (before anything is touched: every apply is logged)."""
    spec = cluster.spec
    try:
        log = RunLog.create(spec.cluster.name)
    except OSError as exc:
        raise RunLogUnwritable(runs_dir(), exc) from None
    log.start_run(
        cluster.source,
        spec.cluster.name,
        nodes=selected,
        limit=options.limit,
        layers=options.layers.tags if options.layers is not None else None,
        force=options.force or None,
        allow_reboot=options.allow_reboot or None,
        include_drained=options.include_drained or None,
    )
    return log


def log_outcome(log: RunLog, result: ApplyResult) -> None:
    """A ``node`` line per node (changed, ok, failed or waiting, why) and the ``end`` line."""
    for name, host in result.hosts.items():
        state = "changed" if host.changed else "ok"
        state = "failed" if not host.ok else "waiting" if name in result.waiting else state
        log.write(
            "node", node=name, result=state, changes=len(host.changed), error=shown(host.error),
            waiting=shown(result.waiting.get(name)),
        )  # fmt: skip
    for name, why in result.waiting.items():
        if name not in result.hosts:
            log.write("node", node=name, result="waiting", changes=0, waiting=shown(why))
    log.write("end", ok=result.ok, changes=result.changes, waiting=len(result.waiting))


def _hold_check(
    ro: Rollout, nodes: list[str], include_drained: bool, result: ApplyResult
) -> tuple[list[str], dict[str, str]]:
    """Which of ``nodes`` may roll, and the operator-held ones among them (reason by node): the
    scheduler is asked once; operators' nodes wait unless ``include_drained``."""
    if not nodes:
        return [], {}
    holds, error = node_hold.read_holds(ro.cluster, nodes)
    if error:
        for name in nodes:
            result.hosts[name] = HostResult(name, error=f"not changed: cannot read which nodes are drained: {error}")
        return [], {}
    ours, operator = classify(holds, ro.record, nodes)
    ro.save()
    if include_drained:
        return nodes, operator
    for name, reason in operator.items():
        result.waiting[name] = (
            f"drained by an operator ({reason}): left alone; apply --include-drained to change it (it stays drained)"
        )
    return ours, {}


def _reboot_others(ro: Rollout, nodes: list[str], include_drained: bool, result: ApplyResult) -> None:
    """Nodes changed outside a batch (a first bring-up, a new node) that need a reboot: rebooted
    batch by batch with a drain when allowed, else left waiting for an operator."""
    needing = [n for n in nodes if result.hosts[n].ok and result.hosts[n].reboot_required]
    if not needing:
        return
    if not ro.allow_reboot:
        for name in needing:
            why = "; ".join(result.hosts[name].reboot_required)
            result.waiting[name] = f"reboot required ({why}): apply --allow-reboot to reboot it (drained first)"
        return
    rolling, operator = _hold_check(ro, needing, include_drained, result)
    run_batches(ro, batch_nodes(ro.spec, rolling), operator, result, deployed=True)


def _record_progress(ro: Rollout, result: ApplyResult, everyone: list[str]) -> None:
    """Nodes that converged join the record's; once every node has, the spec is the cluster's."""
    done = {n for n, h in result.hosts.items() if h.ok and n not in result.waiting}
    record = ro.record
    record.converged = [n for n in everyone if n in done or n in record.converged]
    if len(record.converged) == len(everyone):
        record_applied(ro.cluster)
        record.spec, record.converged = "", []
        ro.note("recorded", [], what="the spec as applied on every node")
    ro.save()


def validate_nodes(cluster: Cluster, nodes: list[str]) -> dict[str, str]:
    """Failed checks by node, from the validator."""
    from gpuforge.validator import validate

    # The batch is still drained (by this rollout) while it is validated: its node state is expected.
    # Mid-rollout the cluster's slurm.conf is mixed by design (batches still to come keep the old one),
    # so slurmctld's hash-mismatch records say nothing about the batch: the check runs after the rollout.
    report = validate(cluster, limit=",".join(nodes), exclude="scheduler.node_state,config.slurm_conf_hash")
    failures: dict[str, str] = {}
    for node, result in report.failures():
        failures.setdefault(node, f"validation failed: {result.id}: {result.message}")
    return failures


def run_deploys(
    cluster: Cluster,
    limit: str | None = None,
    on_event: Callable[[str], None] | None = None,
    run: RunState | None = None,
    locked: bool = False,
) -> ApplyResult:
    """Check the control host, make the secrets once, then run the deploys on the selected nodes
    (dry when ``run.dry_run``), each node under its apply lock (``locked``: the caller, a rollout
    batch, holds the locks already, from before its drain to after its resume)."""
    spec = cluster.spec
    names = select_limit(spec, limit) if limit else None  # a --limit matching no node: before anything else
    preflight(cluster)
    if spec.slurm is not None:
        SecretStore(spec.cluster.name).load()  # generate once, before any host is touched
    if spec.kubernetes is not None:
        SecretStore(spec.cluster.name).kubernetes_pki()  # the cluster CA, before any host is touched
    run = run if run is not None else RunState()
    runner = run_with_site_steps if spec.site.ansible and run.site_steps else run_site
    if run.dry_run or locked:  # a plan changes nothing: no node lock
        return runner(cluster, names, run, on_event)
    wanted = names if names is not None else [n.name for n in resolve_nodes(spec)]
    locks = node_lock.take(cluster, wanted)
    try:
        held = [n for n in wanted if n in locks.held]
        result = runner(cluster, held, run, on_event) if held else ApplyResult({})
    finally:
        locks.release()
    for name, why in locks.refused.items():
        result.hosts[name] = HostResult(name, connected=not why.startswith("unreachable"), error=why)
    result.hosts = {n: result.hosts[n] for n in wanted if n in result.hosts}
    return result

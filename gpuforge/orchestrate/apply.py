"""Run the deploys against a spec's nodes with pyinfra's API.

One unreachable or failing node does not stop the others: it is reported, the rest
converge, and a re-run finishes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gpuforge.deploy.run import ApplyResult, HostResult, run_site
from gpuforge.deploy.runstate import RunState
from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate import k8s_drain, node_lock, remote
from gpuforge.orchestrate.rollout import RolloutPlan, plan_rollout, roll_every_node
from gpuforge.orchestrate.site_steps import run_with_site_steps
from gpuforge.orchestrate.state import RecordUnreadable, apply_lock, last_applied, record_applied
from gpuforge.spec import Role, Spec, SpecError, SpecIssue, hostlist, load_spec, nodes_with, resolve_nodes, select_nodes
from gpuforge.spec.diff import FieldChange
from gpuforge.spec.model import SourceMode


def preflight(spec: Spec, spec_path: str | Path) -> None:
    """Control-host checks before any host is touched (files the connection needs)."""
    issues = []
    for name, value in (("key", spec.ssh.key), ("known_hosts", spec.ssh.known_hosts)):
        if value and not os.access(os.path.expanduser(value), os.R_OK):
            hint = " (is the lab up? gpuforge lab up)" if "/gpuforge/lab/" in value else ""
            issues.append(SpecIssue(("ssh", name), f"file {value} does not exist or is not readable{hint}"))
    bundle = Path(spec.sources.bundle_dir).expanduser() if spec.sources.bundle_dir else None
    if bundle is not None and not bundle.is_dir():
        issues.append(SpecIssue(("sources", "bundle_dir"), f"directory {spec.sources.bundle_dir} does not exist"))
    elif bundle is not None and spec.sources.mode is SourceMode.OFFLINE:
        from gpuforge.bundle.verify import verify_bundle

        for problem in verify_bundle(bundle)[:10]:  # nothing unverified is pushed to a node
            issues.append(SpecIssue(("sources", "bundle_dir"), f"bundle {spec.sources.bundle_dir}: {problem}"))
    if spec.site.ansible:
        from gpuforge.extensions.ansible_run import AnsibleMissing, ansible_playbook_binary

        try:
            ansible_playbook_binary()
        except AnsibleMissing as exc:
            issues.append(SpecIssue(("site", "ansible"), str(exc)))
    if issues:
        raise SpecError(issues, str(spec_path))


class ApplyRefused(Exception):
    """The spec changes fields that cannot change on a running cluster."""

    def __init__(self, fields: list[FieldChange]) -> None:
        self.fields = fields
        lines = [f"  {f.path}: {f.old!r} -> {f.new!r}" for f in fields]
        super().__init__(
            "these fields need a rebuild and cannot change on a running cluster "
            "(apply --force to do it anyway):\n" + "\n".join(lines)
        )


def apply(
    spec_path: str | Path,
    limit: str | None = None,
    on_event: Callable[[str], None] | None = None,
    force: bool = False,
    allow_reboot: bool = False,
) -> ApplyResult:
    """Converge every node (or those in ``limit``, a hostlist/group selector) to the spec.

    Changes are applied by the update policy of the fields they touch (compared with the
    last successful apply): ``live`` everywhere at once, ``rolling`` batch by batch with a
    drain, ``rebuild`` refused unless ``force``. Two applies of one spec file never run at once:
    the second is refused (:class:`gpuforge.orchestrate.state.ApplyLocked`) before anything is touched.
    """
    with apply_lock(spec_path):
        return _apply_locked(spec_path, limit, on_event, force, allow_reboot)


def _apply_locked(
    spec_path: str | Path,
    limit: str | None,
    on_event: Callable[[str], None] | None,
    force: bool,
    allow_reboot: bool,
) -> ApplyResult:
    say = on_event or (lambda _msg: None)
    spec = load_spec(spec_path)
    try:
        rollout = plan_rollout(last_applied(spec_path), spec)
    except RecordUnreadable as exc:
        if not force:
            raise  # fail closed: never everywhere at once when the change is unknown
        say(f"{exc.path} unreadable: --force rolls every node batch by batch")
        rollout = roll_every_node(spec)
    if rollout.refused and not force:
        raise ApplyRefused(rollout.refused)
    if limit is not None or not rollout.needs_rolling:
        result = run_deploys(spec_path, limit, on_event)
    else:
        result = rolling_apply(spec, spec_path, rollout, say, allow_reboot)
    if result.ok and limit is None:
        record_applied(spec, spec_path)
    return result


DRAIN_TAG = "gpuforge: rolling change"


def _controller(spec: Spec) -> str | None:
    ctl = nodes_with(spec, Role.CONTROLLER)
    return ctl[0].name if ctl else None


def _kubectl(spec: Spec, spec_path: str | Path, command: str, timeout: int) -> str | None:
    """Run a kubectl command on the first control plane (error text, or None)."""
    planes = nodes_with(spec, Role.K8S_CONTROL_PLANE)
    if not planes:
        return "no Kubernetes control plane in the spec"
    cp = remote.run(spec, spec_path, planes[0].name, command, timeout=timeout)
    return None if cp.returncode == 0 else (cp.stderr.strip()[-500:] or f"kubectl failed ({cp.returncode})")


def drain(spec: Spec, spec_path: str | Path, nodes: list[str]) -> str | None:
    """Drain ``nodes`` (Slurm: drain and wait for their jobs; Kubernetes: cordon and drain, PDBs
    respected) and return the error text, or None."""
    if spec.kubernetes is not None:
        return _kubectl(spec, spec_path, k8s_drain.drain_command(nodes, spec.rollout.drain_timeout),
                        spec.rollout.drain_timeout + 60)  # fmt: skip
    ctl = _controller(spec)
    if spec.slurm is None or ctl is None:
        return None
    names = hostlist.compress(nodes)
    wait = max(1, spec.rollout.drain_timeout // 5)
    cmd = (
        f"scontrol update NodeName={names} State=DRAIN Reason='{DRAIN_TAG}' && "
        f"for i in $(seq 1 {wait}); do squeue -h -w {names} | grep -q . || exit 0; sleep 5; done; "
        f"echo 'jobs still running on {names} after {spec.rollout.drain_timeout} s' >&2; exit 1"
    )
    cp = remote.run(spec, spec_path, ctl, cmd, timeout=spec.rollout.drain_timeout + 60)
    return None if cp.returncode == 0 else (cp.stderr.strip() or f"drain failed ({cp.returncode})")


def resume(spec: Spec, spec_path: str | Path, nodes: list[str]) -> str | None:
    """Resume nodes this rollout drained (never a node an operator drained for another reason)."""
    if spec.kubernetes is not None:
        return _kubectl(spec, spec_path, k8s_drain.resume_command(nodes), 120)
    ctl = _controller(spec)
    if spec.slurm is None or ctl is None:
        return None
    errors = []
    for name in nodes:
        reason = remote.run(spec, spec_path, ctl, f"sinfo -h -n {name} -o '%E'").stdout.strip()
        if reason.startswith(DRAIN_TAG):
            cp = remote.run(spec, spec_path, ctl, f"scontrol update NodeName={name} State=RESUME")
            if cp.returncode != 0:
                errors.append(f"{name}: {cp.stderr.strip()}")
    return "; ".join(errors) or None


REBOOT_MARKERS = "/var/run/reboot-required /var/lib/gpuforge/reboot-required"


def reboot_if_needed(
    spec: Spec, spec_path: str | Path, nodes: list[str], allowed: bool, say: Callable[[str], None]
) -> dict[str, str]:
    """Reboot nodes that say they need it; errors by node."""
    errors: dict[str, str] = {}
    for name in nodes:
        needed = remote.run(spec, spec_path, name, f"ls {REBOOT_MARKERS} 2>/dev/null | grep -q .").returncode == 0
        if not needed:
            continue
        if not allowed:
            errors[name] = "reboot required (left drained): run apply --allow-reboot"
            continue
        say(f"rebooting {name}")
        remote.run(spec, spec_path, name, "rm -f /var/lib/gpuforge/reboot-required; systemctl reboot", timeout=30)
        gone = remote.wait_reachable(spec, spec_path, name, up=False, timeout=300)
        if not gone or not remote.wait_reachable(spec, spec_path, name, up=True, timeout=900):
            errors[name] = "did not come back after reboot within 15 minutes"
    return errors


def validate_nodes(spec_path: str | Path, nodes: list[str]) -> dict[str, str]:
    """Failed checks by node, from the validator."""
    from gpuforge.validator import validate

    # The batch is still drained (by this rollout) while it is validated: its node state is expected.
    report = validate(load_spec(spec_path), spec_path, limit=",".join(nodes), exclude="scheduler.node_state")
    failures: dict[str, str] = {}
    for node, result in report.failures():
        failures.setdefault(node, f"validation failed: {result.id}: {result.message}")
    return failures


def rolling_apply(
    spec: Spec, spec_path: str | Path, rollout: RolloutPlan, say: Callable[[str], None], allow_reboot: bool
) -> ApplyResult:
    """Live changes everywhere else, then each batch: drain, apply, reboot if needed, validate, resume."""
    everyone = [n.name for n in resolve_nodes(spec)]
    others = [n for n in everyone if n not in rollout.rolling_nodes]
    fields = ", ".join(sorted({c.path for c in rollout.rolling}))
    say(f"rolling change ({fields}) on {hostlist.compress(rollout.rolling_nodes)}")
    result = ApplyResult({})
    if others:
        result.hosts.update(run_deploys(spec_path, ",".join(others), say).hosts)
    for i, batch in enumerate(rollout.batches, 1):
        say(f"batch {i}/{len(rollout.batches)}: draining {hostlist.compress(batch)}")
        error = drain(spec, spec_path, batch)
        if error:
            result.hosts.update({n: HostResult(n, error=f"drain: {error}") for n in batch})
            break
        batch_result = run_deploys(spec_path, ",".join(batch), say)
        result.hosts.update(batch_result.hosts)
        if not batch_result.ok:
            break
        problems = reboot_if_needed(spec, spec_path, batch, allow_reboot, say)
        if not problems:
            problems = validate_nodes(spec_path, batch)
        if problems:
            for name, text in problems.items():
                result.hosts[name].error = f"{text} (node left drained; rollout stopped)"
            break
        error = resume(spec, spec_path, batch)
        if error:
            for name in batch:
                result.hosts[name].error = f"resume: {error}"
            break
    return result


def run_deploys(
    spec_path: str | Path,
    limit: str | None = None,
    on_event: Callable[[str], None] | None = None,
    run: RunState | None = None,
) -> ApplyResult:
    """Check the control host, make the secrets once, then run the deploys on the selected nodes
    (dry when ``run.dry_run``)."""
    spec = load_spec(spec_path)
    preflight(spec, spec_path)
    if spec.slurm is not None:
        SecretStore(spec.cluster.name).load()  # generate once, before any host is touched
    if spec.kubernetes is not None:
        SecretStore(spec.cluster.name).kubernetes_pki()  # the cluster CA, before any host is touched
    names = select_nodes(spec, limit) if limit else None
    run = run if run is not None else RunState()
    runner = run_with_site_steps if spec.site.ansible else run_site
    if run.dry_run:  # a plan changes nothing: no node lock
        return runner(spec, spec_path, names, run, on_event)
    wanted = names if names is not None else [n.name for n in resolve_nodes(spec)]
    locks = node_lock.take(spec, spec_path, wanted)
    try:
        held = [n for n in wanted if n in locks.held]
        result = runner(spec, spec_path, held, run, on_event) if held else ApplyResult({})
    finally:
        locks.release()
    for name, why in locks.refused.items():
        result.hosts[name] = HostResult(name, connected=not why.startswith("unreachable"), error=why)
    result.hosts = {n: result.hosts[n] for n in wanted if n in result.hosts}
    return result

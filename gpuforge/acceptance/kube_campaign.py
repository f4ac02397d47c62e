"""``gpuforge accept`` on Kubernetes: one Job per worker, pinned to it, run, read, judged, removed.

The control host's work, as on Slurm, is a handful of round trips to the first control plane
whatever the node count: one reads the nodes, one applies every Job (server-side apply of one
List), one per poll reads every Job and pod of the campaign, one reads every finished Job's log,
one deletes the campaign's Jobs. The nodes run the same node runner as a Slurm task; the same
parsers, peer comparison (per node group, or leaf switch) and spare planning judge and act.

Invariants: nodes cordoned, tainted by a failed acceptance or not Ready are not tested and left
as they are; a pod still Pending after ``acceptance.start_timeout_s`` has its Job deleted and its
node reported untested; the campaign's Jobs are deleted on every way out (and carry
``ttlSecondsAfterFinished`` besides); a failed node is cordoned and tainted with the reason only
where nobody else holds it (:func:`.kube_nodes.cordon_command`); a step that could not run is an
error of the campaign, never a cordon.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpuforge.acceptance import batch, kube_actions, kube_nodes, slurm_actions, spares
from gpuforge.acceptance.batch import JobGroup, JobOutput
from gpuforge.acceptance.campaign import Cluster, conclude, judge_group
from gpuforge.acceptance.parsers import PASS, StepResult
from gpuforge.acceptance.results import Campaign, GroupRun, NodeResult, campaign_id, spec_hash
from gpuforge.spec import Spec
from gpuforge.spec.acceptance import GroupBy
from gpuforge.spec.cluster import Cluster as Loaded
from gpuforge.spec.nodes import Node
from gpuforge.validator.runner import Transport

Say = Callable[[str], None]


def label_keys(spec: Spec) -> list[str]:
    return sorted({k for pool in spec.acceptance.spares for k in pool.labels})


def peer_group(spec: Spec, node: Node) -> str:
    """Whom a node is compared with: its node group, or its leaf switch (``acceptance.group_by``)."""
    if spec.acceptance.group_by is GroupBy.LEAF_SWITCH:
        return node.leaf_switch or "no-leaf"
    return node.group


def read_nodes(cluster: Cluster, spec: Spec) -> tuple[dict[str, kube_nodes.NodeView], str | None]:
    done = cluster.run(kube_nodes.nodes_command(label_keys(spec)))
    views = kube_nodes.parse_nodes(done.stdout, label_keys(spec))
    if done.rc != 0 and not views:
        return {}, " ".join((done.stderr or done.stdout).split())[:200] or f"exit {done.rc}"
    return views, None


def run_kube_campaign(
    loaded: Loaded,
    *,
    names: list[str] | None = None,
    transport: Transport | None = None,
    say: Say = lambda _: None,
    poll_s: float = 5.0,
    act: bool = True,
    raw_dir: Path | None = None,
) -> Campaign:
    """Test the workers (``names``: only these) with one Job each; ``act``: cordon and taint failed nodes."""
    spec, cluster = loaded.spec, Cluster(loaded, transport)
    started = time.time()
    camp = Campaign(campaign_id(spec, started), spec.cluster.name, str(loaded.path), spec_hash(spec), started)
    nodes = batch.campaign_nodes(spec, names)
    views, error = read_nodes(cluster, spec)
    if error:
        camp.problems.append(f"kubectl get nodes on {cluster.controller.name} failed: {error}")
    testable = [n for n in nodes if n.name in views and views[n.name].in_service]
    for n in nodes:
        if n not in testable:
            why = views[n.name].why_out() + ": left as it is" if n.name in views else "Kubernetes does not list it"
            camp.nodes.append(NodeResult(n.name, peer_group(spec, n), untested=error or why))
    runs = {n.name: GroupRun(kube_actions.job_name(camp.id, n.name), peer_group(spec, n), n.leaf_switch, [n.name])
            for n in testable}  # fmt: skip
    try:
        _submit(cluster, spec, testable, runs, camp.id, say)
        _wait(cluster, spec, runs, camp.id, poll_s, say)
        logs = _collect(cluster, spec, runs, raw_dir, say)
    finally:
        gone = cluster.run(kube_actions.delete_command(spec, camp.id), timeout=300)
        if gone.rc != 0:
            camp.problems.append(
                f"the campaign's Jobs could not be deleted (exit {gone.rc}): they go after "
                f"{spec.acceptance.kubernetes.ttl_seconds_after_finished} s (ttlSecondsAfterFinished)"
            )
    for n in testable:
        camp.nodes.append(_judge(spec, n, runs[n.name], logs.get(n.name)))
        camp.groups.append(runs[n.name])
    conclude(camp, spec, nodes, started, lambda: cordon_failed(cluster, camp, say) if act else None)
    return camp


def _judge(spec: Spec, node: Node, run: GroupRun, output: JobOutput | None) -> NodeResult:
    group = JobGroup(run.name, None, node.leaf_switch, (node.name,), ((node.name, node.hardware.gpu_count),),
                     ((node.name, node.leaf_switch),))  # fmt: skip
    results, _ = judge_group(spec, group, run, output)
    result = results[0]
    result.group = peer_group(spec, node)
    result.steps = [s for s in result.steps if s.step != "container"]
    st = spec.acceptance.steps.container
    if st.enabled and output is not None and node.name in output.reports:
        image = st.image.replace("#", "/")
        result.steps.append(StepResult("container", PASS, f"{image} pulled and ran (the Job's own pod)"))
    return result


def _submit(cluster: Cluster, spec: Spec, nodes: list[Node], runs: dict[str, GroupRun], camp: str, say: Say) -> None:
    if not nodes:
        return
    done = cluster.run(kube_actions.submit_command([kube_actions.kube_job(spec, n, camp) for n in nodes]), timeout=300)
    applied = kube_actions.parse_submitted(done.stdout)
    said = " ".join(line for line in (done.stdout + done.stderr).splitlines() if "job.batch/" not in line)[:200]
    for node, run in runs.items():
        if run.name in applied:
            run.job_id, run.state, run.batch_host = run.name, "PENDING", node
        else:
            run.state, run.note = "NOT_SUBMITTED", f"kubectl apply: {said or f'exit {done.rc}'}"
    say(f"{len(applied)} of {len(runs)} Job(s) applied")


def _wait(cluster: Cluster, spec: Spec, runs: dict[str, GroupRun], camp: str, poll_s: float, say: Say) -> None:
    """Poll the campaign's Jobs until each ended; delete those whose pod did not start in time."""
    t0, limit = time.monotonic(), spec.acceptance.start_timeout_s
    waiting = {node: run for node, run in runs.items() if run.job_id}
    while waiting:
        jobs, pods = kube_actions.parse_state(cluster.run(kube_actions.state_command(spec, camp)).stdout)
        late = []
        for node, run in list(waiting.items()):
            job = jobs.get(node)
            if job is None:
                continue
            phase, reason = pods.get(node, ("", ""))
            run.state = job.state if job.done else (phase.upper() or job.state)
            if job.done:
                run.note = run.note or ("; ".join(f"{k}={v}" for k, v in job.conditions.items() if v == "True"))
                del waiting[node]
            elif phase in ("", "Pending") and time.monotonic() - t0 > limit:
                late.append(run.name)
                run.note = f"its pod did not start within {limit} s ({reason or phase or 'no pod'}): Job deleted"
                run.state = "CANCELLED"
                del waiting[node]
        if late:
            cluster.run(kube_actions.delete_command(spec, camp, late))
        if waiting:
            say(f"{len(waiting)} Job(s) running: " + ", ".join(f"{n} {r.state}" for n, r in list(waiting.items())[:8]))
            time.sleep(poll_s)


def _collect(
    cluster: Cluster, spec: Spec, runs: dict[str, GroupRun], raw_dir: Path | None, say: Say
) -> dict[str, JobOutput]:
    """Every finished Job's log, in one round trip, decoded (a Job deleted as late is not read)."""
    wanted = {node: run.name for node, run in runs.items() if run.job_id and run.state in ("COMPLETE", "FAILED")}
    if not wanted:
        return {}
    done = cluster.run(kube_actions.logs_command(spec, wanted), timeout=600)
    outputs: dict[str, JobOutput] = {}
    for node, (text, rc) in kube_actions.parse_logs(done.stdout).items():
        if raw_dir is not None:
            raw_dir.mkdir(parents=True, exist_ok=True)
            (raw_dir / f"{node}.log").write_text(text)
        if rc != 0:
            runs[node].note = (runs[node].note + "; " if runs[node].note else "") + f"kubectl logs: exit {rc}"
        outputs[node] = batch.decode_output(text, [node], labelled=False)
        if outputs[node].problems:
            runs[node].note = "; ".join([*([runs[node].note] if runs[node].note else []), *outputs[node].problems[:5]])
    say(f"{sum(bool(o.reports) for o in outputs.values())} of {len(wanted)} node report(s) read")
    return outputs


def cordon_failed(cluster: Cluster, camp: Campaign, say: Say) -> None:
    """Cordon and taint every node with a failed step (the first failure as the reason), unless someone else
    holds it."""
    failed = [n for n in camp.nodes if n.failed_steps()]
    if not failed:
        return
    commands = []
    for n in failed:
        first = n.failed_steps()[0]
        reason = slurm_actions.reason_text(slurm_actions.ACCEPT_TAG, f"{first.step}: {first.message}")
        commands.append(kube_nodes.cordon_command(n.node, reason, first.step))
        camp.actions.append({"action": "cordon", "node": n.node, "reason": reason})
    done = cluster.run("\n".join(commands))
    marks = slurm_actions.parse_marks(done.stdout, "GFCORDON")
    for action in camp.actions:
        if action["action"] == "cordon":
            word, rest = marks.get(action["node"], ("error", f"no answer (exit {done.rc})"))
            action["result"] = {"cordoned": "cordoned and tainted", "kept": f"kept: cordoned by someone else "
                                f"({rest or 'no mark'})"}.get(word, f"error: {rest}")  # fmt: skip
            say(f"{action['node']}: {action['result']}")


def restore_capacity(cluster: Cluster, spec: Spec, camp: Campaign, root: Path | None = None,
                     say: Say = lambda _: None) -> None:  # fmt: skip
    """Label healthy spares into node groups short of their size; each move in the campaign and the record."""
    pools = spec.acceptance.spares
    if not pools:
        return
    record = spares.load_record(spec.cluster.name, root)
    views, error = read_nodes(cluster, spec)
    if error:
        camp.problems.append(f"spares: kubectl get nodes failed: {error}")
        return
    members = group_members(spec, views, record)
    out = {n: v.why_out() for n, v in views.items() if not v.in_service}
    out.update({n: "Kubernetes does not list it" for m in members.values() for n in m if n not in views})
    healthy = {n.node for n in camp.nodes if n.status == PASS}
    moves, notes = spares.plan_moves(pools, members, out, healthy, record)
    camp.problems += notes
    by_pool = {p.partition: p for p in pools}
    for move in moves:
        pool = by_pool[move.partition]
        present = [t for t in pool.spare_taints if views[move.spare].has_taint(t)]
        done = cluster.run(kube_nodes.spare_in_command(move.spare, dict(pool.labels), present))
        word, rest = slurm_actions.parse_marks(done.stdout, "GFSPARE").get(move.spare, ("error", f"exit {done.rc}"))
        ok = word == "moved"
        camp.actions.append({"action": "spare-in", "partition": move.partition, "spare": move.spare,
                             "replaces": move.replaces, "reason": move.reason,
                             "result": "moved" if ok else f"error: {rest}"})  # fmt: skip
        if ok:
            record.add_move(move, camp.id)
        say(f"{move.partition}: spare {move.spare} " + ("labelled in" if ok else f"not moved: {rest}"))
    if moves:
        spares.save_record(spec.cluster.name, record, root)


def group_members(
    spec: Spec, views: dict[str, kube_nodes.NodeView], record: spares.SpareRecord
) -> dict[str, list[str]]:
    """Each pool's group now: its node group in the spec (less nodes returned to the pool) and every node
    that carries all of the pool's labels (spares moved in)."""
    groups = {g.name: g.hostnames for g in spec.node_groups}
    out: dict[str, list[str]] = {}
    for pool in spec.acceptance.spares:
        back = set(record.returned.get(pool.partition, []))
        names = [n for n in groups.get(pool.partition, []) if n not in back]
        labelled = [n for n, v in sorted(views.items()) if pool.labels and all(
            v.labels.get(k) == val for k, val in pool.labels.items())]  # fmt: skip
        out[pool.partition] = names + [n for n in labelled if n not in names]
    return out

"""``gpuforge accept``: run a campaign through the cluster's own Slurm, judge it, act on it.

The control host's work does not grow with the node count beyond submitting and collecting:
one SSH round trip to the controller reads the nodes' states, one submits every job, one per
poll reads every job's state, one per job reads its output from its batch host; the nodes run
their steps themselves, in parallel, as Slurm tasks. Judging (:mod:`.parsers`), the peer
comparison (:mod:`.outliers`) and the spare plan (:mod:`.spares`) are pure.

Invariants: nodes out of service when the campaign starts are not tested (reported untested,
left as they are); a failed node is drained only with the acceptance tag and only when nobody
else drained it (:func:`.slurm_actions.drain_command`); a step that could not run is an error
of the campaign, never a drain; a node is never reported passed for a step that did not run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuforge.acceptance import batch, outliers, parsers, slurm_actions
from gpuforge.acceptance.batch import JobGroup, JobOutput
from gpuforge.acceptance.fabric_step import add_fabric_steps, fabric_steps
from gpuforge.acceptance.parsers import ERROR, FAIL, PASS, SKIP, StepResult
from gpuforge.acceptance.results import Campaign, GroupRun, NodeResult, campaign_id, spec_hash
from gpuforge.spec import Role, Scheduler, Spec
from gpuforge.spec.cluster import Cluster as Loaded
from gpuforge.spec.nodes import Node, nodes_with, resolve_nodes
from gpuforge.validator.runner import NO_SECRET_KEX_OPTION, Completed, SshTransport, Transport, remote_shell

Say = Callable[[str], None]


class Cluster:
    """Commands on the controller (Kubernetes: the first control plane) and on nodes, through one
    transport (SSH, host keys checked)."""

    def __init__(self, loaded: Loaded, transport: Transport | None = None) -> None:
        spec = self.spec = loaded.spec
        self.loaded = loaded
        self.transport = transport or SshTransport(loaded, NO_SECRET_KEX_OPTION)
        self.by_name = {n.name: n for n in resolve_nodes(spec)}
        kube = spec.cluster.scheduler is Scheduler.KUBERNETES
        controllers = nodes_with(spec, Role.K8S_CONTROL_PLANE if kube else Role.CONTROLLER)
        if not controllers:
            raise ValueError(f"the spec has no {'Kubernetes control plane' if kube else 'Slurm controller'} to "
                             "submit the campaign's jobs to")  # fmt: skip
        self.controller = controllers[0]

    def run(self, command: str, timeout: float = 120, node: str | None = None) -> Completed:
        target = self.by_name[node] if node else self.controller
        return self.transport.run(target, remote_shell(self.spec, command), None, timeout)


def run_campaign(
    loaded: Loaded,
    *,
    names: list[str] | None = None,
    transport: Transport | None = None,
    say: Say = lambda _: None,
    poll_s: float = 5.0,
    act: bool = True,
    reservation: str | None = None,
    raw_dir: Path | None = None,
) -> Campaign:
    """Test the compute nodes (``names``: only these) and return the campaign; ``act``: drain and spare."""
    spec, cluster = loaded.spec, Cluster(loaded, transport)
    started = time.time()
    camp = Campaign(campaign_id(spec, started), spec.cluster.name, str(loaded.path), spec_hash(spec), started)
    nodes = batch.campaign_nodes(spec, names)
    testable, untested = _read_states(cluster, nodes, camp, reservation is not None)
    groups = batch.plan_groups(spec, testable)
    runs = _submit(cluster, spec, groups, camp.id, reservation, say)
    _wait(cluster, runs, spec.acceptance.start_timeout_s, poll_s, say)
    outputs = _collect(cluster, runs, raw_dir, say)
    for group in groups:
        run = runs[group.name]
        node_results, run.steps = judge_group(spec, group, run, outputs.get(group.name))
        camp.nodes += node_results
        camp.groups.append(run)
    if spec.acceptance.steps.fabric.enabled:  # the validator's pair test, within each leaf, after the jobs
        add_fabric_steps(camp, fabric_steps(loaded, cluster.transport, [r.node for r in camp.nodes], say))
    camp.nodes += [NodeResult(n, "-", untested=why) for n, why in untested.items()]
    conclude(camp, spec, nodes, started, lambda: drain_failed(cluster, camp, say) if act else None)
    return camp


def conclude(camp: Campaign, spec: Spec, nodes: list[Node], started: float, take_out: Callable[[], None]) -> None:
    """The campaign's end, whatever its scheduler: results in the nodes' order, the outliers against
    their peers, then ``take_out`` (drain or cordon the failed nodes) where the spec asks, and the time."""
    order = {n.name: i for i, n in enumerate(nodes)}
    camp.nodes.sort(key=lambda r: order.get(r.node, 0))
    camp.stats, found = outliers.compare(figures(camp.nodes), spec.acceptance.outliers)
    for o in found:
        camp.node(o.node).outliers.append(o)  # type: ignore[union-attr]
    if spec.acceptance.drain_failed:
        take_out()
    camp.duration_s = time.time() - started


def _read_states(
    cluster: Cluster, nodes: list[Node], camp: Campaign, reserved: bool = False
) -> tuple[list[Node], dict[str, str]]:
    """The nodes Slurm can run the campaign on now; the others with why (drained, down, unknown)."""
    if not nodes:
        return [], {}
    done = cluster.run(slurm_actions.states_command([n.name for n in nodes]))
    if done.rc != 0:
        why = " ".join((done.stderr or done.stdout).split())[:200] or f"exit {done.rc}"
        camp.problems.append(f"sinfo on {cluster.controller.name} failed: {why}")
        return [], {n.name: f"the controller could not be asked (sinfo: {why})" for n in nodes}
    states = slurm_actions.parse_states(done.stdout)
    testable, untested = [], {}
    for node in nodes:
        st = states.get(node.name)
        if st is None:
            untested[node.name] = "Slurm does not list it (sinfo)"
        elif not st.usable(reserved):
            untested[node.name] = f"{st.state}" + (f" ({st.reason})" if st.reason else "") + ": left as it is"
        else:
            testable.append(node)
    return testable, untested


def _submit(
    cluster: Cluster, spec: Spec, groups: list[JobGroup], campaign: str, reservation: str | None, say: Say
) -> dict[str, GroupRun]:
    runs = {g.name: GroupRun(g.name, g.partition, g.leaf, list(g.nodes)) for g in groups}
    if not groups:
        return runs
    scripts = {g.name: batch.batch_script(spec, g, campaign, reservation) for g in groups}
    done = cluster.run(slurm_actions.submit_command(scripts), timeout=120)
    submitted = slurm_actions.parse_submitted(done.stdout)
    for name, run in runs.items():
        job, said = submitted.get(name, (None, " ".join((done.stderr or done.stdout).split())[:200]))
        run.job_id = job
        if job is None:
            run.state, run.note = "NOT_SUBMITTED", f"sbatch: {said or f'exit {done.rc}'}"
        say(f"{name}: job {job} on {len(run.nodes)} node(s)" if job else f"{name}: not submitted ({run.note})")
    return runs


def _wait(cluster: Cluster, runs: dict[str, GroupRun], start_timeout: float, poll_s: float, say: Say) -> None:
    """Poll every job until it ended; cancel those still pending after ``start_timeout``."""
    t0 = time.monotonic()
    waiting = {r.job_id: r for r in runs.values() if r.job_id}
    while waiting:
        done = cluster.run(slurm_actions.jobs_command(list(waiting)))
        states = slurm_actions.parse_jobs(done.stdout)
        late = []
        for job, run in list(waiting.items()):
            st = states.get(job)
            if st is None:
                continue
            run.state, run.batch_host = st.state, st.batch_host or run.batch_host
            if st.done or st.state == "GONE":
                run.note = run.note or (f"exit {st.exit_code}" if st.exit_code else "")
                del waiting[job]
            elif st.state == "PENDING" and time.monotonic() - t0 > start_timeout:
                late.append(job)
                run.note = f"did not start within {start_timeout:.0f} s ({st.reason}): cancelled"
        if late:
            cluster.run(slurm_actions.cancel_command(late))
        if waiting:
            say(f"{len(waiting)} job(s) running: " + ", ".join(f"{r.name} {r.state}" for r in waiting.values()))
            time.sleep(poll_s)


def _collect(cluster: Cluster, runs: dict[str, GroupRun], raw_dir: Path | None, say: Say) -> dict[str, JobOutput]:
    outputs: dict[str, JobOutput] = {}
    for name, run in runs.items():
        if not run.job_id or not run.batch_host or run.batch_host not in cluster.by_name:
            continue
        done = cluster.run(slurm_actions.output_command(run.job_id), timeout=300, node=run.batch_host)
        if done.rc != 0:
            run.note = (run.note + "; " if run.note else "") + f"output unreadable on {run.batch_host}: exit {done.rc}"
            continue
        if raw_dir is not None:
            raw_dir.mkdir(parents=True, exist_ok=True)
            (raw_dir / f"{name}.out").write_text(done.stdout)
        outputs[name] = batch.decode_output(done.stdout, run.nodes)
        if outputs[name].problems:
            run.note = "; ".join([*([run.note] if run.note else []), *outputs[name].problems[:5]])
        say(f"{name}: {len(outputs[name].reports)} of {len(run.nodes)} node report(s) read from {run.batch_host}")
    return outputs


# --------------------------------------------------------------------------- judging (pure)


def judge_record(spec: Spec, record: dict[str, Any]) -> StepResult:
    """One runner record judged by its step's parser and the spec's thresholds."""
    st = spec.acceptance.steps
    name = record.get("name", "?")
    if name == "health":
        return parsers.judge_health(record)
    if name == "cpu":
        return parsers.judge_stress("cpu", record, "cpu", st.cpu.min_bogo_ops_per_s)
    if name == "memory":
        return parsers.judge_stress("memory", record, "vm", st.memory.min_bogo_ops_per_s)
    if name == "disk":
        return parsers.judge_fio(record, st.disk.min_read_iops, st.disk.min_write_iops)
    if name == "dcgm":
        return parsers.judge_dcgm(record)
    if name == "nccl_node":
        return parsers.judge_nccl("nccl_node", record, st.nccl.min_busbw_gbps)
    return StepResult(str(name), ERROR, "a step this gpuforge does not know")


def judge_group(
    spec: Spec, group: JobGroup, run: GroupRun, output: JobOutput | None
) -> tuple[list[NodeResult], list[StepResult]]:
    """Every node's results of one job, and the results of the steps that span its nodes."""
    if output is None or not output.reports:
        why = _no_report_reason(run, output)
        if output is None:
            return [NodeResult(n, group.name, untested=why) for n in group.nodes], []
        return [NodeResult(n, group.name, [StepResult("job", ERROR, why)]) for n in group.nodes], []
    rc = output.steps.get("nodes", {}).get("rc")
    results = []
    for name in group.nodes:
        report = output.reports.get(name)
        if report is None:
            results.append(NodeResult(name, group.name, [StepResult("job", FAIL, f"its task printed no report "
                                                                    f"(srun exit {rc})")]))  # fmt: skip
            continue
        steps = [judge_record(spec, rec) for rec in report.get("steps", [])]
        results.append(NodeResult(name, group.name, steps))
    container = _container_results(spec, group, output)
    for res in results:
        if container and res.node in container and res.steps and res.steps[0].step != "job":
            res.steps.append(container[res.node])
    return results, _leaf_results(spec, group, output)


def _no_report_reason(run: GroupRun, output: JobOutput | None) -> str:
    if run.job_id is None:
        return f"no job: {run.note}"
    if output is None:
        return f"job {run.job_id} {run.state or '?'}: {run.note or 'its output was not read'}"
    tail = " | ".join(output.container_text[-2:]) or "no output"
    srun = f" (srun exit {output.steps['nodes'].get('rc')})" if "nodes" in output.steps else ""
    return f"job {run.job_id} {run.state}: no node reported{srun}: {tail}"


def _container_results(spec: Spec, group: JobGroup, output: JobOutput) -> dict[str, StepResult]:
    st = spec.acceptance.steps.container
    if not st.enabled:
        return {}
    if not batch.pyxis_on(spec):
        return {n: StepResult("container", SKIP, "slurm.containers.pyxis is off in the spec") for n in group.nodes}
    step = output.steps.get("container")
    if step is None:
        return {n: StepResult("container", ERROR, "the container step did not run") for n in group.nodes}
    took = float(step.get("seconds", 0))
    tail = " | ".join(output.container_text[-2:])[:250] or f"srun exit {step.get('rc')}"
    everyone_failed = not (output.container_ok & set(group.nodes)) and len(group.nodes) > 1
    out = {}
    for n in group.nodes:
        if n in output.container_ok:
            out[n] = StepResult("container", PASS, f"{st.image} pulled and ran ({took:.0f} s for the step)", {}, took)
        else:
            out[n] = StepResult("container", ERROR if everyone_failed else FAIL, f"{st.image}: {tail}", {}, took)
    return out


def _leaf_results(spec: Spec, group: JobGroup, output: JobOutput) -> list[StepResult]:
    """One result per leaf switch whose GPU nodes ran all_reduce_perf together."""
    found = []
    for name, step in output.steps.items():
        if not name.startswith("nccl_leaf."):
            continue
        leaf = name.split(".", 1)[1]
        record = {"status": "ran", "rc": step.get("rc"), "stdout": "\n".join(output.leaf_text.get(leaf, [])),
                  "stderr": "", "duration_s": step.get("seconds", 0)}  # fmt: skip
        found.append(parsers.judge_nccl(name, record, spec.acceptance.steps.nccl.min_busbw_gbps))
    return found


def figures(nodes: list[NodeResult]) -> dict[tuple[str, str, str], dict[str, float]]:
    """Every numeric figure of a passed step: ``[(group, step, metric)][node] = value``."""
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for n in nodes:
        for s in n.steps:
            if s.status != PASS:
                continue
            for metric, value in s.metrics.items():
                out.setdefault((n.group, s.step, metric), {})[n.node] = value
    return out


# --------------------------------------------------------------------------- acting


def drain_failed(cluster: Cluster, camp: Campaign, say: Say) -> None:
    """Drain every node with a failed step (the first failure as the reason), unless someone else drained it."""
    failed = [n for n in camp.nodes if n.failed_steps()]
    if not failed:
        return
    commands = []
    for n in failed:
        first = n.failed_steps()[0]
        reason = slurm_actions.reason_text(slurm_actions.ACCEPT_TAG, f"{first.step}: {first.message}")
        commands.append(slurm_actions.drain_command(n.node, reason))
        camp.actions.append({"action": "drain", "node": n.node, "reason": reason})
    done = cluster.run("\n".join(commands))
    marks = slurm_actions.parse_marks(done.stdout, "GFDRAIN")
    for action in camp.actions:
        if action["action"] == "drain":
            word, rest = marks.get(action["node"], ("error", f"no answer (exit {done.rc})"))
            action["result"] = word if word != "kept" else f"kept: already out of service ({rest})"
            if word == "error":
                action["result"] = f"error: {rest}"
            say(f"{action['node']}: {action['result']}")

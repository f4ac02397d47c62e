"""``gpuforge accept`` and ``gpuforge replace`` (typer commands, registered by :mod:`gpuforge.cli`).

Exit status of accept: 0 every tested node passed and none is an outlier or untested; 1 a node
failed, is an outlier or was left untested; 2 bad input or nothing could run. replace: 0 done,
1 it could not be done (no healthy spare, the node did not pass), 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuforge.console import console
from gpuforge.spec import LIMIT_HELP, Scheduler, Spec, SpecError, load_or_exit, select_limit
from gpuforge.spec.cluster import Cluster as Loaded

err = console(stderr=True)


def _refuse(message: str) -> typer.Exit:
    print(f"gpuforge: {message}", file=sys.stderr)
    return typer.Exit(2)


def plan_text(spec: Spec, names: list[str] | None) -> str:
    """``--plan``: every batch script (Slurm) or Job manifest (Kubernetes), nothing submitted."""
    from gpuforge.acceptance import batch
    from gpuforge.acceptance.results import campaign_id

    camp = campaign_id(spec, 0.0).replace("19700101T000000.000Z", "plan")
    nodes = batch.campaign_nodes(spec, names)
    if spec.cluster.scheduler is Scheduler.KUBERNETES:
        from gpuforge.acceptance.kube_actions import kube_job

        docs = [kube_job(spec, n, camp) for n in nodes]
        return "\n---\n".join(json.dumps(d, indent=2) for d in docs) + "\n"
    parts = []
    for g in batch.plan_groups(spec, nodes):
        leaf = f", leaf {g.leaf}" if g.leaf is not None else ""  # grouped by partition only: no leaf
        parts.append(f"# ---- job {g.name}: {len(g.nodes)} node(s), partition {g.partition}{leaf}\n")
        parts.append(batch.batch_script(spec, g, camp))
    return "".join(parts)


def _baseline(spec: Spec, value: str | None, current_id: str) -> dict[str, Any] | None:
    from gpuforge.acceptance import results

    if value is None:
        return None
    path = results.latest(spec.cluster.name, before=current_id) if value == "latest" else Path(value)
    if path is None:
        raise _refuse("--baseline latest: no earlier campaign of this cluster is saved")
    try:
        return results.load(path)
    except (OSError, ValueError) as e:
        raise _refuse(f"--baseline {value}: {e}") from None


def _outputs(campaign: Any, doc: dict[str, Any], worse: list[str] | None, paths: dict[str, Path | None]) -> Path:
    """campaign.json and report.html in the campaign's folder; --junit/--prom/--html where asked."""
    from gpuforge.acceptance import results
    from gpuforge.acceptance.html import render_html

    saved = results.save(campaign)
    page = render_html(doc, worse)
    results.write_atomic(saved.with_name("report.html"), page)
    if paths["html"] is not None:
        results.write_atomic(paths["html"], page)
    if paths["junit"] is not None:
        results.write_atomic(paths["junit"], campaign.as_report().to_junit())
    if paths["prom"] is not None:
        results.write_atomic(paths["prom"], campaign.to_prometheus())
    return saved


def accept_typer(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML)")],
    limit: Annotated[str | None, typer.Option(help=LIMIT_HELP)] = None,
    plan: Annotated[
        bool, typer.Option("--plan", help="Print the batch scripts (Kubernetes: the Jobs); run nothing")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the campaign as one JSON document")] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML here")] = None,
    prom: Annotated[Path | None, typer.Option("--prom", help="Write a node-exporter textfile here")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the HTML report here")] = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="A saved campaign (file, folder or 'latest'): show what got worse")
    ] = None,
    no_act: Annotated[bool, typer.Option("--no-act", help="Report only: drain no node, move no spare")] = False,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between two reads of the jobs' states")] = 5.0,
) -> None:
    """Run an acceptance campaign as Slurm jobs (Kubernetes: a Job per worker): burn-in, diagnostics, peer
    outliers, drains (cordons) and spares."""
    from gpuforge.acceptance import kube_campaign, replace, report
    from gpuforge.acceptance.campaign import Cluster, run_campaign
    from gpuforge.acceptance.results import campaigns_dir

    s = load_or_exit(spec)
    try:
        names = select_limit(s, limit) if limit else None
    except SpecError as e:
        raise _refuse(e.format()) from None
    if plan:
        sys.stdout.write(plan_text(s, names))
        raise typer.Exit(0)
    kube = s.cluster.scheduler is Scheduler.KUBERNETES
    with err.status("accepting") as status:
        try:
            cluster = Cluster(Loaded.of(s, spec))
        except ValueError as e:
            raise _refuse(str(e)) from None
        raw = campaigns_dir(s.cluster.name) / "raw-pending"
        run, restore = (kube_campaign.run_kube_campaign, kube_campaign.restore_capacity) if kube else (
            run_campaign, replace.restore_capacity)  # fmt: skip
        camp = run(cluster.loaded, names=names, transport=cluster.transport, say=status.update, poll_s=poll,
                   act=not no_act, raw_dir=raw)  # fmt: skip
        if not no_act:
            restore(cluster, s, camp, say=status.update)
    doc = camp.to_dict()
    base = _baseline(s, baseline, camp.id)
    worse = report.regressions(doc, base, s.acceptance.outliers.margin_percent) if base is not None else None
    try:
        saved = _outputs(camp, doc, worse, {"html": html, "junit": junit, "prom": prom})
        if raw.is_dir():
            raw.rename(saved.parent / "raw")
    except OSError as e:
        raise _refuse(f"cannot write the results: {e}") from None
    if json_out:
        sys.stdout.write(json.dumps({**doc, "regressions": worse, "saved": str(saved)}, indent=2) + "\n")
    else:
        report.print_campaign(doc, console(), worse)
        print(f"saved: {saved} (report: {saved.with_name('report.html')})")
    raise typer.Exit(camp.exit_code)


def replace_typer(
    spec: Annotated[Path, typer.Argument(help="Cluster spec (YAML)")],
    node: Annotated[str, typer.Argument(help="The node to take out (or, with --back, to return to the spare pool)")],
    back: Annotated[
        bool, typer.Option("--back", help="NODE is repaired: test it; if it passes it joins the spare pool")
    ] = False,
    poll: Annotated[float, typer.Option("--poll", help="Seconds between two reads of the job's state")] = 5.0,
) -> None:
    """Take NODE out of its partition (Kubernetes: cordon and taint it) and move a healthy spare in (recorded);
    --back returns it (Slurm)."""
    from gpuforge.acceptance import replace
    from gpuforge.acceptance.campaign import Cluster

    s = load_or_exit(spec)
    if not s.acceptance.spares:
        raise _refuse("acceptance.spares is empty in the spec: there is no spare pool")
    kube = s.cluster.scheduler is Scheduler.KUBERNETES
    if kube and back:
        raise _refuse("replace --back is Slurm only for now: on Kubernetes, uncordon the repaired node, remove its "
                      "group labels and put the spare taints back (docs/acceptance.md)")  # fmt: skip
    try:
        cluster = Cluster(Loaded.of(s, spec))
        if kube:
            from gpuforge.acceptance import kube_replace

            outcome = kube_replace.replace_node(cluster, s, node)
        elif back:
            outcome, camp = replace.return_node(cluster, node, poll_s=poll)
            if camp is not None:
                _outputs(camp, camp.to_dict(), None, {"html": None, "junit": None, "prom": None})
        else:
            outcome = replace.replace_node(cluster, s, node)
    except ValueError as e:
        raise _refuse(str(e)) from None
    for a in outcome.actions:
        print(json.dumps(a))
    print(outcome.message)
    raise typer.Exit(0 if outcome.ok else 1)

"""``gpuforge log``: what each apply did, from the run logs on this control host.

Node text in the logs is shown with control characters escaped (a node's output never moves the
operator's cursor or writes their clipboard) and never read as Rich markup.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from gpuforge.console import console

err = console(stderr=True)


def log_cmd(
    node: Annotated[str | None, typer.Option("--node", help="Only what was done to this node")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From this date or time (2026-11-20, 2026-11-20T14:00) or age (30m, 12h, 7d)"),
    ] = None,
    last: Annotated[bool, typer.Option("--last", help="Only the latest apply")] = False,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Only the applies of this cluster")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="The log's lines as they are kept: one JSON object a line on stdout")
    ] = False,
) -> None:
    """What each apply did: every step on every node, with its command, result and time (the run logs)."""
    from gpuforge.deploy.runlog import BadSince, parse_since, read_entries, run_files, runs_dir, select_entries
    from gpuforge.validator.report import terminal_safe

    try:
        after = parse_since(since) if since is not None else None
    except BadSince as e:
        err.print(f"--since: {e}", markup=False, highlight=False)
        raise typer.Exit(2) from None
    files = run_files()
    runs = []
    for path in files:
        entries, bad = read_entries(path)
        if bad:
            err.print(f"{path}: {bad} line(s) could not be read (cut by a crash?)", markup=False, highlight=False)
        kept = select_entries(entries, node=node, since=after, cluster=cluster)
        if kept:
            runs.append(kept)
    if last:
        runs = runs[-1:]
    if not runs:
        where = f" for {node}" if node else ""
        err.print(f"no apply logged{where} in {runs_dir()}", markup=False, highlight=False)
        return
    for entries in runs:
        for entry in entries:
            print(json.dumps(entry) if json_out else terminal_safe(log_line(entry)))


def log_line(entry: dict[str, Any]) -> str:
    """One run-log line as ``gpuforge log`` prints it (local time, then what happened)."""
    from datetime import datetime

    stamp = str(entry.get("started") or entry.get("time"))
    try:
        when = datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        when = stamp
    event = entry.get("event")
    if event == "run":
        tags = f", only {', '.join(entry['layers'])}" if entry.get("layers") else ""
        limit = f", --limit {entry['limit']}" if entry.get("limit") else ""
        sudo = f" (sudo from {entry['sudo_user']})" if entry.get("sudo_user") else ""
        who = f"{entry.get('user')}@{entry.get('host')}{sudo}"
        return f"{when}  apply of {entry.get('spec')} by {who}{limit}{tags}"
    if event == "step":
        took = f"{entry['duration_s']:.1f}s" if "duration_s" in entry else "-"
        what = entry.get("path") or entry.get("summary") or ""
        error = f"  [{entry['error']}]" if entry.get("error") else ""
        return (
            f"{when}  {entry.get('node')}  {entry.get('layer')}  {entry.get('kind')}  {entry.get('result')}  "
            f"{took}  {what}{error}"
        )
    if event == "node":
        why = entry.get("error") or entry.get("waiting") or ""
        changes = entry.get("changes", 0)
        return f"{when}  {entry.get('node')}  {entry.get('result')} ({changes} change(s)) {why}".rstrip()
    if event == "end":
        return f"{when}  end: {'ok' if entry.get('ok') else 'FAILED'}, {entry.get('changes', 0)} change(s)"
    nodes = entry.get("nodes")
    rest = {k: v for k, v in entry.items() if k not in ("time", "run", "event", "nodes")}
    return f"{when}  {event} {hostlist_text(nodes)} {json.dumps(rest) if rest else ''}".rstrip()


def hostlist_text(nodes: Any) -> str:
    from gpuforge.spec import hostlist

    return hostlist.compress([str(n) for n in nodes]) if isinstance(nodes, list) and nodes else ""

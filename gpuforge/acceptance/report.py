"""What a person reads on the terminal: nodes x steps, the failed and outlier nodes, what was done,
and against ``--baseline`` what got worse. Works on the campaign documents (``Campaign.to_dict``),
so a saved campaign compares the same as the one just run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuforge.validator.report import terminal_safe

#: Worse to the right: a node's verdict moving right got worse.
RANK = {"pass": 0, "skip": 0, "outlier": 1, "untested": 2, "error": 2, "fail": 3}
STYLE = {"pass": "green", "fail": "bold red", "error": "yellow", "skip": "dim", "outlier": "magenta",
         "untested": "yellow"}  # fmt: skip


def step_names(doc: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for n in doc["nodes"]:
        for s in n["steps"]:
            if s["step"] not in seen:
                seen.append(s["step"])
    return seen


def print_campaign(doc: dict[str, Any], console: Console, regressions: list[str] | None = None) -> None:
    """The table, the failures and outliers with their figures and medians, the actions, the verdict."""
    steps = step_names(doc)
    table = Table(title=f"gpuforge accept {doc['cluster']} ({doc['id']})")
    for col in ("node", "group", *steps, "verdict"):
        table.add_column(col, justify="center" if col in steps else "left")
    for n in doc["nodes"]:
        by = {s["step"]: s for s in n["steps"]}
        flagged = {o["step"] for o in n["outliers"]}
        cells: list[Text | str] = [n["node"], n["group"]]
        for step in steps:
            s = by.get(step)
            word = "-" if s is None else ("outlier" if step in flagged and s["status"] == "pass" else s["status"])
            cells.append(Text(word, style=STYLE.get(word, "")))
        cells.append(Text(n["status"], style=STYLE.get(n["status"], "")))
        table.add_row(*cells)
    console.print(table)
    for line in problem_lines(doc):
        console.print(Text(terminal_safe(line)))
    for line in regressions or []:
        console.print(Text("worse than the baseline: " + terminal_safe(line), style="red"))
    s = doc["summary"]
    console.print(f"{s['pass']} passed, {s['fail']} failed, {s['error']} could not run, {s['outlier']} outlier(s), "
                  f"{s['untested']} untested, in {doc['duration_s']:.0f} s")  # fmt: skip


def problem_lines(doc: dict[str, Any]) -> list[str]:
    """One line per failed or untested node, per outlier (figure and median), per action and problem."""
    lines = []
    for n in doc["nodes"]:
        for s in n["steps"]:
            if s["status"] in ("fail", "error"):
                lines.append(f"{n['node']}: {s['step']} {s['status']}: {s['message']}")
        if n["untested"]:
            lines.append(f"{n['node']}: untested: {n['untested']}")
        for o in n["outliers"]:
            lines.append(f"{n['node']}: outlier: {o['step']}.{o['metric']} = {o['value']:g}, median {o['median']:g} "
                         f"({o['below_percent']:.1f}% below)")  # fmt: skip
    for g in doc["groups"]:
        for s in g["steps"]:
            lines.append(f"group {g['name']}: {s['step']} {s['status']}: {s['message']}")
    for a in doc["actions"]:
        what = a.get("node") or a.get("spare")
        lines.append(f"{a['action']} {what}: {a.get('result', '')}" + (f" ({a['reason']})" if a.get("reason") else ""))
    lines += [f"problem: {p}" for p in doc["problems"]]
    return lines


def regressions(doc: dict[str, Any], baseline: dict[str, Any], margin_percent: float) -> list[str]:
    """What got worse since ``baseline``: a node's verdict or a step's status, a figure down by more
    than ``margin_percent`` on the same node, a new outlier."""
    before = {n["node"]: n for n in baseline["nodes"]}
    out = []
    for n in doc["nodes"]:
        old = before.get(n["node"])
        if old is None:
            continue
        if RANK.get(n["status"], 0) > RANK.get(old["status"], 0):
            out.append(f"{n['node']}: {old['status']} -> {n['status']}")
        old_steps = {s["step"]: s for s in old["steps"]}
        for s in n["steps"]:
            o = old_steps.get(s["step"])
            if o is None:
                continue
            if RANK.get(s["status"], 0) > RANK.get(o["status"], 0):
                out.append(f"{n['node']}: {s['step']} {o['status']} -> {s['status']}: {s['message']}")
            for metric, value in s["metrics"].items():
                was = o["metrics"].get(metric)
                if was and value < was * (1 - margin_percent / 100):
                    out.append(f"{n['node']}: {s['step']}.{metric} {was:g} -> {value:g} "
                               f"({100 * (value - was) / was:+.1f}%)")  # fmt: skip
        old_flags = {(o["step"], o["metric"]) for o in old["outliers"]}
        for o in n["outliers"]:
            if (o["step"], o["metric"]) not in old_flags:
                out.append(f"{n['node']}: new outlier {o['step']}.{o['metric']} = {o['value']:g} "
                           f"(median {o['median']:g})")  # fmt: skip
    return out

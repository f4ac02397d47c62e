"""The campaign as one static HTML page: opens in a browser from disk, no server, no script, no fetch.

Parts (each with an ``id`` a test or a reader can find): ``summary``; ``failed`` and ``outliers``
(who, which step, the message or the figure beside the median); ``regressions`` (against a
baseline); ``heatmap`` (an SVG of nodes x steps, a cell per status); ``bars`` (per (group, step,
metric) an SVG of per-node bars with the median line and the median +/- one robust deviation
band shaded, outliers in another colour); ``actions``. Every text from the campaign (node names,
messages a node printed) is HTML-escaped; the page carries a Content-Security-Policy that allows
no script and no remote resource.
"""

from __future__ import annotations

from html import escape
from typing import Any

from gpuforge.acceptance.outliers import MAD_SCALE
from gpuforge.acceptance.report import problem_lines, step_names

COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "error": "#f9a825", "skip": "#bdbdbd", "outlier": "#8e24aa",
           "untested": "#fb8c00", "-": "#eeeeee"}  # fmt: skip
CSS = (
    "body{font-family:sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:.9em}"
    ".fail{color:#c62828}.outlier{color:#8e24aa}svg text{font-size:11px;font-family:sans-serif}"
    "figure{display:inline-block;margin:0 1em 1em 0;vertical-align:top}"
)


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def heatmap(doc: dict[str, Any]) -> str:
    """Nodes (rows) x steps (columns), one coloured cell per status (outlier where a figure was flagged)."""
    steps = step_names(doc) or ["-"]
    cell, left, top = 22, max(60, 8 * max((len(n["node"]) for n in doc["nodes"]), default=4)), 90
    width, height = left + cell * len(steps) + 10, top + cell * len(doc["nodes"]) + 10
    parts = [f'<svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="nodes by steps">']  # fmt: skip
    for j, step in enumerate(steps):
        x = left + j * cell + cell // 2
        parts.append(f'<text x="{x}" y="{top - 6}" transform="rotate(-60 {x} {top - 6})">{_e(step)}</text>')
    for i, n in enumerate(doc["nodes"]):
        y = top + i * cell
        parts.append(f'<text x="4" y="{y + 15}">{_e(n["node"])}</text>')
        by = {s["step"]: s["status"] for s in n["steps"]}
        flagged = {o["step"] for o in n["outliers"]}
        for j, step in enumerate(steps):
            status = "untested" if n["untested"] else by.get(step, "-")
            if step in flagged and status == "pass":
                status = "outlier"
            parts.append(f'<rect class="cell {status}" x="{left + j * cell}" y="{y}" width="{cell - 2}" '
                         f'height="{cell - 2}" fill="{COLOURS.get(status, "#999")}"><title>{_e(n["node"])} '
                         f'{_e(step)}: {_e(status)}</title></rect>')  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def bars(doc: dict[str, Any], stat: dict[str, Any]) -> str:
    """One metric of one (group, step): a bar per node, the median line and the robust band."""
    values = [(n["node"], s["metrics"][stat["metric"]]) for n in doc["nodes"] if n["group"] == stat["group"]
              for s in n["steps"] if s["step"] == stat["step"] and stat["metric"] in s["metrics"]]  # fmt: skip
    if not values:
        return ""
    flagged = {o["node"] for n in doc["nodes"] for o in n["outliers"]
               if (o["group"], o["step"], o["metric"]) == (stat["group"], stat["step"], stat["metric"])}  # fmt: skip
    top = max(max(v for _, v in values), stat["median"] + MAD_SCALE * stat["mad"]) or 1.0
    bar, gap, height, left, base = 18, 6, 160, 46, 180
    width = left + len(values) * (bar + gap) + 10

    def y(v: float) -> float:
        """The bar's top: a figure above 0 stands at least 1 px tall, however small against the top
        (a reader tells a slow node from one that measured nothing)."""
        return base - (max(height * v / top, 1.0) if v > 0 else 0.0)

    low, high = stat["median"] - MAD_SCALE * stat["mad"], stat["median"] + MAD_SCALE * stat["mad"]
    key = f"{stat['group']}/{stat['step']}.{stat['metric']}"
    parts = [f'<figure><svg class="bars" data-metric="{_e(key)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{base + 40}" role="img" aria-label="{_e(key)} per node">',
             f'<rect class="band" x="{left}" y="{y(high):.1f}" width="{width - left}" '
             f'height="{max(y(low) - y(high), 1):.1f}" fill="#90caf9" opacity="0.45"/>']  # fmt: skip
    for i, (node, value) in enumerate(values):
        x = left + i * (bar + gap)
        colour = COLOURS["outlier"] if node in flagged else "#546e7a"
        parts.append(f'<rect class="bar{" outlier" if node in flagged else ""}" x="{x}" y="{y(value):.1f}" '
                     f'width="{bar}" height="{base - y(value):.1f}" fill="{colour}"><title>{_e(node)}: {value:g}'
                     f'</title></rect><text x="{x}" y="{base + 14}" transform="rotate(40 {x} {base + 14})">'
                     f'{_e(node)}</text>')  # fmt: skip
    parts.append(f'<line class="median" x1="{left}" x2="{width}" y1="{y(stat["median"]):.1f}" '
                 f'y2="{y(stat["median"]):.1f}" stroke="#0d47a1" stroke-width="2"/>'
                 f'<text x="2" y="{y(stat["median"]) + 4:.1f}">{stat["median"]:.4g}</text></svg>'
                 f'<figcaption>{_e(key)}: median {stat["median"]:.4g}, MAD {stat["mad"]:.3g}, '
                 f'{stat["count"]} node(s)</figcaption></figure>')  # fmt: skip
    return "".join(parts)


def _list(list_id: str, items: list[str], css: str = "") -> str:
    if not items:
        return f'<p id="{list_id}">none</p>'
    return f'<ul id="{list_id}">' + "".join(f'<li class="{css}">{_e(i)}</li>' for i in items) + "</ul>"


def render_html(doc: dict[str, Any], regressions: list[str] | None = None) -> str:
    """The whole page."""
    s = doc["summary"]
    lines = problem_lines(doc)
    acts = tuple(f"{a['action']} " for a in doc["actions"])
    failed = [x for x in lines if ": outlier: " not in x and not x.startswith((*acts, "problem:"))]
    outliers = [x for x in lines if ": outlier: " in x]
    actions = [x for x in lines if acts and x.startswith(acts)] + [x for x in lines if x.startswith("problem:")]
    charts = "".join(bars(doc, st) for st in doc["stats"])
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:\">",
        f"<title>gpuforge accept {_e(doc['cluster'])} {_e(doc['id'])}</title><style>{CSS}</style></head><body>",
        f"<h1>Acceptance campaign {_e(doc['id'])} of {_e(doc['cluster'])}</h1>",
        f'<p id="summary">{s["pass"]} passed, {s["fail"]} failed, {s["error"]} could not run, {s["outlier"]} '
        f'outlier(s), {s["untested"]} untested; spec {_e(doc["spec"])} (hash {_e(doc["spec_hash"])}), started '
        f'{_e(doc["started_at"])}, {doc["duration_s"]:.0f} s</p>',
        "<h2>Failed and untested nodes</h2>", _list("failed", failed, "fail"),
        "<h2>Outliers (figure against the group median)</h2>", _list("outliers", outliers, "outlier"),
        *(["<h2>Worse than the baseline</h2>", _list("regressions", regressions, "fail")] if regressions is not None
          else []),
        "<h2>Nodes by steps</h2>", heatmap(doc),
        "<h2>Figures per node (median line, median &#177; 1.4826 MAD shaded)</h2>",
        f'<div id="bars">{charts or "<p>no figures</p>"}</div>',
        "<h2>Actions and problems</h2>", _list("actions", actions),
        "</body></html>\n",
    ])  # fmt: skip

"""The monitoring node's rendered files and the dashboards' PromQL, shared by the promtool and lab tests."""

from __future__ import annotations

import json

from gpuforge.render import monitoring as mon
from gpuforge.render.files import Secrets
from gpuforge.spec import resolve_nodes
from gpuforge.spec.model import Spec

#: Grafana's template variables in the dashboards; a query run outside Grafana matches anything there.
GRAFANA_VARIABLES = ("$cluster", "$node", "$partition")


def monitoring_files(spec: Spec) -> dict[str, str]:
    """Path -> content of every monitoring file the spec's (first) monitoring node gets."""
    node = next(n for n in resolve_nodes(spec) if n.has(mon.Role.MONITORING))
    return {f.path: str(f.content) for f in mon.monitoring_files(spec, node, Secrets.redacted())}


def dashboard_queries(spec: Spec) -> list[tuple[str, str]]:
    """(dashboard name, PromQL) of every panel, Grafana's variables replaced by the regex ``.*``."""
    files = monitoring_files(spec)
    out: list[tuple[str, str]] = []
    for name in mon.dashboard_names():
        for expr in mon.dashboard_exprs(json.loads(files[f"{mon.DASHBOARD_DIR}/{name}.json"])):
            for var in GRAFANA_VARIABLES:
                expr = expr.replace(var, ".*")
            out.append((name, expr))
    return out

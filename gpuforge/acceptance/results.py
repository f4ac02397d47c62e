"""A campaign's results: per node and step, the peer statistics and outliers, what was done.

One JSON document per campaign (:meth:`Campaign.to_dict`, kept under the state dir as
``<state>/<cluster>/acceptance/<id>/campaign.json``, the id being the UTC time and the spec's
hash), read back by :func:`load` for ``--baseline``. The validator's report forms (JUnit XML,
Prometheus textfile) come from :meth:`Campaign.as_report`; the human table and the HTML report
are :mod:`.report` and :mod:`.html`.

A node's verdict: ``fail`` when a step failed, else ``error`` when a step could not run, else
``outlier`` when a figure is below its peers, else ``pass``; ``untested`` when it could not be
part of a job (drained, down, its job never started). Exit status: 0 every tested node passed
and none was left out, 1 a node failed, is an outlier or was left untested, 2 nothing ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.acceptance.outliers import GroupStats, Outlier
from gpuforge.acceptance.parsers import ERROR, FAIL, PASS, SKIP, StepResult
from gpuforge.spec import Spec

SCHEMA = 1
UNTESTED, OUTLIER = "untested", "outlier"


@dataclass
class NodeResult:
    """One node's part of the campaign."""

    node: str
    group: str
    steps: list[StepResult] = field(default_factory=list)
    untested: str | None = None
    """Why the node was not tested (None: it was)."""
    outliers: list[Outlier] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.untested is not None:
            return UNTESTED
        statuses = {s.status for s in self.steps}
        for status in (FAIL, ERROR):
            if status in statuses:
                return status
        return OUTLIER if self.outliers else PASS

    def failed_steps(self) -> list[StepResult]:
        return [s for s in self.steps if s.status == FAIL]


@dataclass
class GroupRun:
    """One job: its nodes, its Slurm record, and the steps that span its nodes."""

    name: str
    partition: str | None
    leaf: str | None
    nodes: list[str]
    job_id: str | None = None
    state: str | None = None
    batch_host: str | None = None
    note: str = ""
    steps: list[StepResult] = field(default_factory=list)


@dataclass
class Campaign:
    """Everything one ``gpuforge accept`` found and did."""

    id: str
    cluster: str
    spec_path: str
    spec_hash: str
    started_at: float
    duration_s: float = 0.0
    groups: list[GroupRun] = field(default_factory=list)
    nodes: list[NodeResult] = field(default_factory=list)
    stats: list[GroupStats] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def outliers(self) -> list[Outlier]:
        return [o for n in self.nodes for o in n.outliers]

    @property
    def ran(self) -> bool:
        return any(n.untested is None and n.steps for n in self.nodes)

    @property
    def exit_code(self) -> int:
        if not self.ran:
            return 2
        return 0 if all(n.status == PASS for n in self.nodes) else 1

    def node(self, name: str) -> NodeResult | None:
        return next((n for n in self.nodes if n.node == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "id": self.id, "cluster": self.cluster, "spec": self.spec_path,
            "spec_hash": self.spec_hash, "started_at": _stamp(self.started_at), "started_ts": self.started_at,
            "duration_s": round(self.duration_s, 3), "exit_code": self.exit_code,
            "summary": {s: sum(n.status == s for n in self.nodes) for s in (PASS, FAIL, ERROR, OUTLIER, UNTESTED)},
            "groups": [_group_dict(g) for g in self.groups],
            "nodes": [{"node": n.node, "group": n.group, "status": n.status, "untested": n.untested,
                       "steps": [s.to_dict() for s in n.steps],
                       "outliers": [o.__dict__ for o in n.outliers]} for n in self.nodes],
            "stats": [dict(s.__dict__) for s in self.stats],
            "actions": self.actions, "problems": self.problems,
        }  # fmt: skip

    def as_report(self) -> Any:
        """The campaign as the validator's report (JUnit XML and Prometheus forms): a check per step."""
        from gpuforge.validator.node.framework import Result
        from gpuforge.validator.report import NodeReport, Report

        mapped = {PASS: "pass", FAIL: "fail", ERROR: "error", SKIP: "skip"}
        nodes = []
        for n in self.nodes:
            checks = [Result(f"accept.{s.step}", "job", "critical", mapped[s.status], s.message, s.duration_s)
                      for s in n.steps]  # fmt: skip
            if n.untested is not None:
                checks.append(Result("accept.job", "job", "critical", "blocked", n.untested))
            checks += [Result(f"accept.outlier.{o.step}.{o.metric}", "job", "warning", "fail", o.text())
                       for o in n.outliers]  # fmt: skip
            nodes.append(NodeReport(n.node, checks))
        return Report(self.cluster, self.spec_path, nodes, self.started_at, self.duration_s)

    def to_prometheus(self) -> str:
        """The validator's textfile lines, then each figure and each outlier."""
        text = self.as_report().to_prometheus()
        lines = ["# HELP gpuforge_accept_figure A figure of an acceptance step on a node (higher is better).",
                 "# TYPE gpuforge_accept_figure gauge"]  # fmt: skip
        for n in self.nodes:
            for s in n.steps:
                for metric, value in s.metrics.items():
                    lines.append(f'gpuforge_accept_figure{{node="{n.node}",step="{s.step}",metric="{metric}"}} {value}')
        lines += ["# HELP gpuforge_accept_outlier 1 when the node's figure is below its group's median by the margin.",
                  "# TYPE gpuforge_accept_outlier gauge"]  # fmt: skip
        for o in self.outliers:
            lines.append(f'gpuforge_accept_outlier{{node="{o.node}",step="{o.step}",metric="{o.metric}"}} 1')
        return text + "\n".join(lines) + "\n"


def _stamp(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _group_dict(g: GroupRun) -> dict[str, Any]:
    return {"name": g.name, "partition": g.partition, "leaf": g.leaf, "nodes": g.nodes, "job_id": g.job_id,
            "state": g.state, "batch_host": g.batch_host, "note": g.note,
            "steps": [s.to_dict() for s in g.steps]}  # fmt: skip


def spec_hash(spec: Spec) -> str:
    """The first 12 hex digits of the SHA-256 of the spec as loaded (comments and key order do not count)."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:12]


def campaign_id(spec: Spec, started: float) -> str:
    """``<UTC time to the millisecond>-<spec hash>``: unique per run, sorted by time."""
    ms = int(started * 1000) % 1000
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(started)) + f".{ms:03d}Z-" + spec_hash(spec)


def campaigns_dir(cluster: str, root: Path | None = None) -> Path:
    from gpuforge.deploy.secrets import state_root

    return (root or state_root()) / cluster / "acceptance"


def save(campaign: Campaign, root: Path | None = None) -> Path:
    """Write ``campaign.json`` atomically into the campaign's folder; its path."""
    folder = campaigns_dir(campaign.cluster, root) / campaign.id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campaign.json"
    write_atomic(path, json.dumps(campaign.to_dict(), indent=2) + "\n")
    return path


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def load(path: Path) -> dict[str, Any]:
    """A saved campaign document: a ``campaign.json``, or its folder (ValueError: not one)."""
    if path.is_dir():
        path = path / "campaign.json"
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or "nodes" not in doc:
        raise ValueError(f"{path} is not a gpuforge campaign document (schema {SCHEMA})")
    return doc


def latest(cluster: str, root: Path | None = None, before: str | None = None) -> Path | None:
    """The newest saved campaign of ``cluster`` (older than ``before``, an id), or None."""
    folder = campaigns_dir(cluster, root)
    ids = sorted(p.parent.name for p in folder.glob("*/campaign.json") if p.is_file()) if folder.is_dir() else []
    ids = [i for i in ids if before is None or i < before]
    return folder / ids[-1] / "campaign.json" if ids else None

"""The validation report and its forms: rich table, JSON (``report.schema.json``), JUnit XML, Prometheus."""

from __future__ import annotations

import json
import os
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuforge.validator.node.base import BLOCKED, ERROR, FAIL, LAYERS, PASS, SKIP, STATUSES
from gpuforge.validator.node.framework import Result

#: Statuses a report counts: the node checks' and ``error`` (site checks).
REPORT_STATUSES = (*STATUSES, ERROR)
FAILING = (FAIL, ERROR)

#: Characters XML 1.0 does not allow (its ``Char`` production), and C0/C1 controls a terminal acts on.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_NOT_PRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _shown(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}" if ord(match.group()) < 0x100 else f"\\u{ord(match.group()):04x}"


def xml_safe(text: str) -> str:
    """``text`` with what XML 1.0 cannot carry written as ``\\xNN`` (node output may hold any byte)."""
    return _NOT_XML.sub(_shown, text)


def terminal_safe(text: str) -> str:
    """``text`` with control characters (escape sequences a terminal would act on) written as ``\\xNN``."""
    return _NOT_PRINTABLE.sub(_shown, text)


SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
SCHEMA_VERSION = 1


@dataclass
class NodeReport:
    """One node's results, in layer order."""

    name: str
    checks: list[Result] = field(default_factory=list)

    @property
    def reachable(self) -> bool:
        conn = next((r for r in self.checks if r.id == "connection.ssh"), None)
        return conn is None or conn.status == PASS

    @property
    def ok(self) -> bool:
        return not any(r.status in FAILING for r in self.checks)


@dataclass
class Report:
    """Everything ``gpuforge validate`` found."""

    cluster: str
    spec_path: str
    nodes: list[NodeReport]
    started_at: float = field(default_factory=time.time)
    duration_s: float = 0.0

    @property
    def could_not_run(self) -> bool:
        """No node could be reached: nothing was validated."""
        return bool(self.nodes) and not any(n.reachable for n in self.nodes)

    @property
    def ok(self) -> bool:
        return not self.could_not_run and all(n.ok for n in self.nodes)

    @property
    def exit_code(self) -> int:
        """0 all passed (skips allowed), 1 a check failed, 2 could not run."""
        if self.could_not_run:
            return 2
        return 0 if self.ok else 1

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(REPORT_STATUSES, 0)
        for n in self.nodes:
            for r in n.checks:
                out[r.status] += 1
        return out

    def failures(self) -> list[tuple[str, Result]]:
        return [(n.name, r) for n in self.nodes for r in n.checks if r.status in FAILING]

    # ------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document (see ``report.schema.json``)."""
        counts = self.counts()
        return {
            "schema_version": SCHEMA_VERSION,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "cluster": self.cluster,
            "spec": self.spec_path,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
            "duration_s": round(self.duration_s, 3),
            "summary": {
                "nodes": len(self.nodes),
                "unreachable": [n.name for n in self.nodes if not n.reachable],
                "checks": sum(counts.values()),
                **counts,
            },
            "nodes": [{"name": n.name, "ok": n.ok, "checks": [r.to_dict() for r in n.checks]} for n in self.nodes],
            "failures": [
                {"node": node, "id": r.id, "layer": r.layer, "severity": r.severity, "message": r.message}
                for node, r in self.failures()
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    # ------------------------------------------------------------------ JUnit

    def to_junit(self) -> str:
        """JUnit XML: a testsuite per node, a testcase per check (classname = node)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.started_at))
        counts = self.counts()
        root = ET.Element(
            "testsuites",
            name=f"gpuforge validate {self.cluster}",
            tests=str(sum(counts.values())),
            failures=str(counts[FAIL]),
            errors=str(counts[ERROR]),
            time=f"{self.duration_s:.3f}",
        )
        for i, n in enumerate(self.nodes):
            suite = ET.SubElement(
                root,
                "testsuite",
                name=n.name,
                tests=str(len(n.checks)),
                failures=str(sum(r.status == FAIL for r in n.checks)),
                errors=str(sum(r.status == ERROR for r in n.checks)),
                skipped=str(sum(r.status in (SKIP, BLOCKED) for r in n.checks)),
                time=f"{sum(r.duration_s for r in n.checks):.3f}",
                timestamp=stamp,
                hostname=n.name,
                id=str(i),
                package=self.cluster,
            )
            for r in n.checks:
                case = ET.SubElement(
                    suite, "testcase", classname=xml_safe(n.name), name=xml_safe(r.id), time=f"{r.duration_s:.3f}"
                )
                message = xml_safe(r.message)
                if r.status in FAILING:
                    tag = "failure" if r.status == FAIL else "error"
                    failure = ET.SubElement(case, tag, message=message, type=xml_safe(f"{r.layer}/{r.severity}"))
                    failure.text = message
                elif r.status in (SKIP, BLOCKED):
                    ET.SubElement(case, "skipped", message=f"{r.status}: {message}")
        ET.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

    # ------------------------------------------------------------------ Prometheus

    def to_prometheus(self) -> str:
        """node-exporter textfile collector format."""

        def esc(v: str) -> str:
            return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines = [
            "# HELP gpuforge_check_status 1 when a gpuforge check passed, 0 when it failed or was blocked "
            "(skipped checks are not exported).",
            "# TYPE gpuforge_check_status gauge",
        ]
        for n in self.nodes:
            for r in n.checks:
                if r.status == SKIP:
                    continue
                labels = f'node="{esc(n.name)}",check="{esc(r.id)}",layer="{esc(r.layer)}",severity="{r.severity}"'
                lines.append(f"gpuforge_check_status{{{labels}}} {1 if r.status == PASS else 0}")
        lines += ["# HELP gpuforge_checks Checks per node by result.", "# TYPE gpuforge_checks gauge"]
        for n in self.nodes:
            for status in REPORT_STATUSES:
                count = sum(r.status == status for r in n.checks)
                lines.append(f'gpuforge_checks{{node="{esc(n.name)}",status="{status}"}} {count}')
        lines += [
            "# HELP gpuforge_validate_ok 1 when every check passed or was skipped.",
            "# TYPE gpuforge_validate_ok gauge",
            f'gpuforge_validate_ok{{cluster="{esc(self.cluster)}"}} {int(self.ok)}',
            "# HELP gpuforge_validate_duration_seconds How long the validation took.",
            "# TYPE gpuforge_validate_duration_seconds gauge",
            f'gpuforge_validate_duration_seconds{{cluster="{esc(self.cluster)}"}} {self.duration_s:.3f}',
            "# HELP gpuforge_validate_last_run_timestamp_seconds When the validation ran.",
            "# TYPE gpuforge_validate_last_run_timestamp_seconds gauge",
            f'gpuforge_validate_last_run_timestamp_seconds{{cluster="{esc(self.cluster)}"}} {self.started_at:.3f}',
        ]
        return "\n".join(lines) + "\n"

    # ------------------------------------------------------------------ human

    def print(self, console: Console) -> None:
        """Nodes x layers, then every failure with its message."""
        layers = [layer for layer in LAYERS if any(r.layer == layer for n in self.nodes for r in n.checks)]
        table = Table(title=f"gpuforge validate {self.cluster}", show_lines=False)
        table.add_column("node", style="bold")
        for layer in layers:
            table.add_column(layer, justify="center")
        for n in self.nodes:
            row: list[Text | str] = [n.name]
            for layer in layers:
                row.append(_cell([r for r in n.checks if r.layer == layer]))
            table.add_row(*row)
        console.print(table)
        failures = self.failures()
        if failures:
            ft = Table(title="failures", show_lines=False)
            for col in ("node", "check", "severity", "message"):
                ft.add_column(col, overflow="fold")
            for node, r in failures:
                ft.add_row(node, terminal_safe(r.id), r.severity, Text(terminal_safe(r.message)))
            console.print(ft)
        counts = self.counts()
        verdict = "[green]OK[/]" if self.ok else ("[red]COULD NOT RUN[/]" if self.could_not_run else "[red]FAILED[/]")
        console.print(
            f"{verdict}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[ERROR]} errors, {counts[SKIP]} skipped, "
            f"{counts[BLOCKED]} blocked on {len(self.nodes)} node(s) in {self.duration_s:.1f} s"
        )


def _cell(results: list[Result]) -> Text:
    if not results:
        return Text("-", style="dim")
    failed = sum(r.status in FAILING for r in results)
    blocked = sum(r.status == BLOCKED for r in results)
    passed = sum(r.status == PASS for r in results)
    if failed:
        return Text(f"FAIL {failed}/{len(results)}", style="bold red")
    if blocked:
        return Text(f"blocked {blocked}", style="yellow")
    if passed:
        return Text(f"ok {passed}", style="green")
    return Text("skip", style="dim")


def write_atomic(path: str | Path, text: str) -> None:
    """Write a file so that readers (node-exporter's textfile collector) never see half of it."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, p)

"""Report forms: JSON against report.schema.json, JUnit against the Jenkins XSD, Prometheus textfile, table."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import xmlschema
from rich.console import Console

from gpuforge.probes.metrics import parse_prometheus_text
from gpuforge.spec.cluster import Cluster
from gpuforge.validator.node import output
from gpuforge.validator.node.base import BLOCKED, FAIL, PASS, SKIP
from gpuforge.validator.node.framework import Result
from gpuforge.validator.report import SCHEMA_PATH, NodeReport, Report
from gpuforge.validator.runner import validate

from .vhelpers import FakeCluster, lab_spec

JUNIT_XSD = Path(__file__).with_name("junit.xsd")


@pytest.fixture()
def broken_report(tmp_path: Path) -> Report:
    """The lab with node2 drained, node3 unreachable and a label needing escapes."""
    spec, path = lab_spec(tmp_path)
    fake = FakeCluster(spec)
    fake.sinfo["node2"][0] = "drained"
    fake.reasons["node2"] = 'said "no" \\ twice'
    fake.unreachable.add("node3")
    return validate(Cluster.of(spec, path), transport=fake)


def sample_report() -> Report:
    r = [
        Result("connection.ssh", "connection", "critical", PASS, "reached", 0.1),
        Result("driver.version", "driver", "critical", FAIL, 'driver 550 loaded, the spec pins "535" <&>', 0.01),
        Result("gpu.ecc", "hardware", "critical", BLOCKED, "driver.smi fail: x", 0.0),
        Result("gpu.mig", "hardware", "critical", SKIP, "no MIG layout for this node", 0.0),
    ]
    return Report("c1", "spec.yaml", [NodeReport("gpu001", r), NodeReport("gpu002", [r[0]])], duration_s=1.5)


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return data


def test_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())


@pytest.mark.parametrize("which", ["sample", "broken"])
def test_json_report_validates(which: str, broken_report: Report) -> None:
    report = sample_report() if which == "sample" else broken_report
    doc = json.loads(report.to_json())
    jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker()).validate(doc)
    assert doc["ok"] is False and doc["exit_code"] == 1
    assert doc["summary"]["checks"] == sum(len(n["checks"]) for n in doc["nodes"])
    assert all(f["id"] for f in doc["failures"])


def test_json_schema_rejects_what_it_should() -> None:
    doc = json.loads(sample_report().to_json())
    v = jsonschema.Draft202012Validator(schema())
    bad = json.loads(json.dumps(doc))
    bad["nodes"][0]["checks"][0]["status"] = "passed"
    assert not v.is_valid(bad)
    bad = json.loads(json.dumps(doc))
    del bad["nodes"][0]["checks"][0]["duration_s"]
    assert not v.is_valid(bad)
    bad = json.loads(json.dumps(doc))
    bad["nodes"][0]["checks"][0]["layer"] = "firmware"
    assert not v.is_valid(bad)


def test_broken_report_content(broken_report: Report) -> None:
    doc = broken_report.to_dict()
    assert doc["summary"]["unreachable"] == ["node3"]
    failed = {(f["node"], f["id"]) for f in doc["failures"]}
    assert ("node2", "scheduler.node_state") in failed and ("node3", "connection.ssh") in failed


def test_junit_validates_against_the_jenkins_xsd(broken_report: Report) -> None:
    xsd = xmlschema.XMLSchema(str(JUNIT_XSD))
    for report in (sample_report(), broken_report):
        text = report.to_junit()
        xsd.validate(text)
        doc = xsd.to_dict(text)
        suites = doc["testsuite"]
        assert [s["@name"] for s in suites] == [n.name for n in report.nodes]
        cases = [c for s in suites for c in s["testcase"]]
        assert len(cases) == sum(len(n.checks) for n in report.nodes)  # one testcase per node x check
        assert all(c["@classname"] in {n.name for n in report.nodes} for c in cases)
        n_fail = sum(1 for c in cases if "failure" in c)
        n_skip = sum(1 for c in cases if "skipped" in c)
        counts = report.counts()
        assert n_fail == counts[FAIL] and n_skip == counts[SKIP] + counts[BLOCKED]


def test_junit_failure_carries_the_message() -> None:
    text = sample_report().to_junit()
    assert 'message="driver 550 loaded, the spec pins &quot;535&quot; &lt;&amp;&gt;"' in text
    assert 'type="driver/critical"' in text
    assert '<skipped message="blocked: driver.smi fail: x" />' in text
    assert '<skipped message="skip: no MIG layout for this node" />' in text


SAMPLE_RE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\} -?[0-9.e+]+$')


def check_textfile(text: str) -> dict[str, Any]:
    """Prometheus text format 0.0.4 as node-exporter's textfile collector reads it."""
    assert text.endswith("\n")
    seen_type: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert kind in ("gauge", "counter") and name not in seen_type
            seen_type.add(name)
            continue
        assert SAMPLE_RE.match(line), line
        assert line.split("{")[0] in seen_type, f"sample before its TYPE: {line}"
    return parse_prometheus_text(text.splitlines())


def test_prometheus_textfile(broken_report: Report) -> None:
    metrics = check_textfile(broken_report.to_prometheus())
    status = {
        (s["labels"]["node"], s["labels"]["check"]): s["value"] for s in metrics["gpuforge_check_status"]["samples"]
    }
    assert status[("node2", "scheduler.node_state")] == 0
    assert status[("node1", "scheduler.node_state")] == 1
    assert status[("node3", "scheduler.munge")] == 0  # blocked counts as not OK
    assert ("node1", "hardware.gpu_count") not in status  # skipped checks are not exported
    assert metrics["gpuforge_validate_ok"]["samples"][0]["value"] == 0
    counts = {(s["labels"]["node"], s["labels"]["status"]): s["value"] for s in metrics["gpuforge_checks"]["samples"]}
    assert counts[("node3", "fail")] == 1


def test_prometheus_label_escaping() -> None:
    r = Result("driver.version", "driver", "critical", FAIL, "x")
    report = Report('we"ird\\', "s", [NodeReport('n"1', [r])])
    text = report.to_prometheus()
    check_textfile(text)
    assert 'node="n\\"1"' in text and 'cluster="we\\"ird\\\\"' in text


def test_nodelocal_textfile_is_valid_too() -> None:
    results = [
        Result("gpu.xid", "hardware", "critical", FAIL, "x"),
        Result("gpu.mig", "hardware", "critical", SKIP, "y"),
    ]
    metrics = check_textfile(output.prometheus_text("gpu001", results, now=1.0))
    assert metrics["gpuforge_check_status"]["samples"][0]["value"] == 0
    assert metrics["gpuforge_health_last_run_timestamp_seconds"]["samples"][0]["value"] == 1.0


def test_table_shows_nodes_layers_and_failure_messages(broken_report: Report) -> None:
    console = Console(record=True, width=200)
    broken_report.print(console)
    text = console.export_text()
    for word in ("node1", "node2", "node3", "connection", "scheduler", "security", "FAIL", "failures"):
        assert word in text
    assert "node2 is drained" in text and "node3 unreachable" in text
    assert "FAILED" in text


def test_exit_codes() -> None:
    ok = Report("c", "s", [NodeReport("n1", [Result("connection.ssh", "connection", "critical", PASS, "")]),
                           NodeReport("n2", [Result("gpu.mig", "hardware", "critical", SKIP, "")])])  # fmt: skip
    assert ok.exit_code == 0 and ok.ok
    assert sample_report().exit_code == 1
    down = Report("c", "s", [NodeReport("n1", [Result("connection.ssh", "connection", "critical", FAIL, "down")])])
    assert down.exit_code == 2 and down.could_not_run


def test_node_output_with_control_characters_keeps_the_junit_readable() -> None:
    """A failing check whose message carries what a node printed (an escape sequence, a NUL, a
    form feed, a lone surrogate): the JUnit file still parses and validates, the bytes are shown
    as ``\\xNN``, and the human table shows no escape sequence a terminal would act on."""
    import io
    import xml.etree.ElementTree as ET

    message = "nvidia-smi: \x1b[31mNVML\x1b[0m \x00 failed\x0c \ud800 end"
    r = Result("gpu.smi", "driver", "critical", FAIL, message, 0.1)
    report = Report("c1", "spec.yaml", [NodeReport("gpu001", [r])], duration_s=0.2)
    text = report.to_junit()
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(text)
    failure = ET.fromstring(text).find("./testsuite/testcase/failure")
    assert failure is not None
    shown = "nvidia-smi: \\x1b[31mNVML\\x1b[0m \\x00 failed\\x0c \\ud800 end"
    assert failure.get("message") == shown and failure.text == shown
    out = io.StringIO()
    report.print(Console(file=out, width=300, force_terminal=True, color_system=None))
    assert "\x1b[31m" not in out.getvalue() and "\x00" not in out.getvalue()
    assert "\\x1b[31mNVML" in out.getvalue()

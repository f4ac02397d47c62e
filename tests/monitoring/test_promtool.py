"""The rendered monitoring files, checked by Prometheus' and Alertmanager's own tools.

``promtool check config`` / ``check rules`` and ``amtool check-config`` on every example
spec's files; ``promtool test rules`` runs ``rules_test.yml`` (each alert fires on sample
series, healthy series stay silent) against the rules rendered for slurm-h100; every
dashboard panel's PromQL must parse. promtool and amtool come from Debian's ``prometheus``
and ``prometheus-alertmanager`` packages (scripts/setup.sh installs them): without them
these tests fail, they do not skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuforge.render import monitoring as mon
from gpuforge.spec.model import Spec
from tests import yaml_text
from tests.helpers import inventory, variant
from tests.monitoring.panels import dashboard_queries, monitoring_files

HERE = Path(__file__).resolve().parent
INVENTORY_NAMES = ("slurm-h100", "k8s-gpu-operator", "lab")


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: scripts/setup.sh installs it (Debian prometheus / prometheus-alertmanager)"
    return path


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def write_prometheus(spec: Spec, out: Path) -> Path:
    """prometheus.yml and its rules under ``out`` (rule_files pointed there: promtool reads them)."""
    files = monitoring_files(spec)
    (out / "gpuforge-rules.yml").write_text(files[mon.PROMETHEUS_RULES])
    doc = yaml.safe_load(files[mon.PROMETHEUS_CONFIG])
    assert doc["rule_files"] == [mon.PROMETHEUS_RULES]
    doc["rule_files"] = [str(out / "gpuforge-rules.yml")]
    config = out / "prometheus.yml"
    config.write_text(yaml_text.dump(doc))
    return config


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_promtool_check_config_and_rules(inv: str, tmp_path: Path) -> None:
    config = write_prometheus(inventory(inv), tmp_path)
    cp = run(tool("promtool"), "check", "config", str(config))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS" in cp.stdout and "rules found" in cp.stdout
    cp = run(tool("promtool"), "check", "rules", str(tmp_path / "gpuforge-rules.yml"))
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a rule with a PromQL syntax error is refused."""
    (tmp_path / "bad.yml").write_text("groups:\n- name: x\n  rules:\n  - alert: X\n    expr: up ==\n")
    assert run(tool("promtool"), "check", "rules", str(tmp_path / "bad.yml")).returncode != 0


def test_operator_reasons_with_regex_characters_stay_valid_promql(tmp_path: Path) -> None:
    """Each reason is an RE2 literal inside a PromQL string literal: both escapes, or promtool
    refuses the whole rules file (a lone "\\(" is an unknown escape) and no alert is evaluated."""
    reasons = ["admin (x|y) $HOME.", "a{2}*"]
    spec = variant("lab", lambda d: d["monitoring"].update(alerts={"operator_reasons": reasons}))
    config = write_prometheus(spec, tmp_path)
    cp = run(tool("promtool"), "check", "rules", str(config.parent / "gpuforge-rules.yml"))
    assert cp.returncode == 0, cp.stdout + cp.stderr


def test_promtool_test_rules(tmp_path: Path) -> None:
    (tmp_path / "gpuforge-rules.yml").write_text(monitoring_files(inventory("slurm-h100"))[mon.PROMETHEUS_RULES])
    shutil.copy(HERE / "rules_test.yml", tmp_path / "rules_test.yml")
    cp = run(tool("promtool"), "test", "rules", "rules_test.yml", cwd=tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "SUCCESS" in cp.stdout


def test_rule_tests_cover_every_alert() -> None:
    tests = yaml.safe_load((HERE / "rules_test.yml").read_text())["tests"]
    tested = {c["alertname"] for t in tests for c in t["alert_rule_test"]}
    rules = yaml.safe_load(monitoring_files(inventory("slurm-h100"))[mon.PROMETHEUS_RULES])
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert tested == alerts
    silent = {c["alertname"] for t in tests for c in t["alert_rule_test"] if not c["exp_alerts"]}
    assert {"NodeDown", "GpuXidError", "GpuTemperatureHigh", "GpuforgeCheckFailing", "DiskNearlyFull"} <= silent


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_amtool_check_config(inv: str, tmp_path: Path) -> None:
    def change(d: dict) -> None:
        d["monitoring"].update(
            receivers=[
                {"name": "hook", "webhook_url": "http://10.213.0.1:9999/alerts"},
                {"name": "mail", "email": "ops@example.org"},
            ],
            smtp_smarthost="smtp.example.org:25",
            smtp_from="gpuforge@example.org",
        )

    for spec in (inventory(inv), variant(inv, change)):
        config = tmp_path / "alertmanager.yml"
        config.write_text(monitoring_files(spec)[mon.ALERTMANAGER_CONFIG])
        cp = run(tool("amtool"), "check-config", str(config))
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert "1 inhibit rules" in cp.stdout


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Every panel's PromQL, checked by promtool as recording rules (a query that does not parse fails)."""
    rules = [
        {"record": f"dashboard:{name.replace('-', '_')}:{i}", "expr": expr}
        for i, (name, expr) in enumerate(dashboard_queries(inventory("slurm-h100")))
    ]
    assert len(rules) >= 20
    path = tmp_path / "dashboards.yml"
    path.write_text(yaml_text.dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    cp = run(tool("promtool"), "check", "rules", str(path))
    assert cp.returncode == 0, cp.stdout + cp.stderr

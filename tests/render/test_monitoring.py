"""Monitoring renderers: scrape config, exporter arguments, alert rules, Alertmanager, collector
timers and dashboards, consistent with the exporters the NVIDIA layer sets up. promtool/amtool
checks of the same files are in tests/monitoring/."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
import yaml

from gpuforge.render import alert_rules, nvidia
from gpuforge.render import monitoring as mon
from gpuforge.render.files import Secrets
from gpuforge.spec import resolve_nodes
from gpuforge.spec.errors import SpecError
from gpuforge.spec.model import Role, Spec
from gpuforge.spec.roles import ROLE_DEPLOYS
from gpuforge.spec.xid_catalog import CRITICAL_XIDS
from tests.helpers import inventory, variant

SECRETS = Secrets.redacted()
INVENTORY_NAMES = ("slurm-h100", "k8s-gpu-operator", "lab")

# Prometheus configuration rules (prometheus.io/docs/prometheus/latest/configuration/configuration/).
DURATION = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TARGET = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$")
GLOBAL_KEYS = {"scrape_interval", "scrape_timeout", "evaluation_interval", "external_labels"}
SCRAPE_KEYS = {
    "job_name",
    "scrape_interval",
    "scrape_timeout",
    "metrics_path",
    "scheme",
    "static_configs",
    "relabel_configs",
}


def files_of(spec: Spec, name: str) -> dict[str, str]:
    node = next(n for n in resolve_nodes(spec) if n.name == name)
    return {f.path: str(f.content) for f in mon.monitoring_files(spec, node, SECRETS)}


def monitoring_node(spec: Spec) -> str:
    return next(n.name for n in resolve_nodes(spec) if n.has(mon.Role.MONITORING))


def load_prometheus(spec: Spec) -> dict[str, Any]:
    doc = yaml.safe_load(files_of(spec, monitoring_node(spec))[mon.PROMETHEUS_CONFIG])
    assert isinstance(doc, dict)
    return doc


def check_prometheus_config(doc: dict[str, Any]) -> None:
    assert set(doc) <= {"global", "rule_files", "alerting", "scrape_configs"}
    assert doc["rule_files"] == [mon.PROMETHEUS_RULES]
    assert set(doc["global"]) <= GLOBAL_KEYS
    for key in ("scrape_interval", "evaluation_interval"):
        assert DURATION.match(doc["global"][key]) and doc["global"][key]
    assert all(LABEL_NAME.match(k) for k in doc["global"].get("external_labels", {}))
    names = [job["job_name"] for job in doc["scrape_configs"]]
    assert len(names) == len(set(names)), "job names must be unique"
    for job in doc["scrape_configs"]:
        assert set(job) <= SCRAPE_KEYS
        for sc in job["static_configs"]:
            assert set(sc) <= {"targets", "labels"}
            assert sc["targets"] and all(isinstance(t, str) and TARGET.match(t) for t in sc["targets"])
            assert all(LABEL_NAME.match(k) and isinstance(v, str) for k, v in sc.get("labels", {}).items())
            assert set(sc["labels"]) == {"node_group", "cluster"}
        assert job["relabel_configs"] == [mon.node_relabel()]


def targets(doc: dict[str, Any], job: str) -> list[str]:
    for j in doc["scrape_configs"]:
        if j["job_name"] == job:
            return [t for sc in j["static_configs"] for t in sc["targets"]]
    return []


def args_of(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("ARGS="))
    (value,) = shlex.split(line.split("=", 1)[1])  # one quoted word; systemd splits $ARGS on spaces
    return value.split()


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_prometheus_config_is_well_formed(inv: str) -> None:
    check_prometheus_config(load_prometheus(inventory(inv)))


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_node_exporter_on_every_node(inv: str) -> None:
    spec = inventory(inv)
    doc = load_prometheus(spec)
    port = spec.monitoring.node_exporter_port
    assert targets(doc, "node-exporter") == [f"{n.name}:{port}" for n in resolve_nodes(spec)]
    assert doc["global"]["scrape_interval"] == spec.monitoring.scrape_interval
    assert doc["global"]["external_labels"] == {"cluster": spec.cluster.name}


def test_dcgm_exporter_targets_are_the_gpu_nodes_running_it() -> None:
    spec = inventory("slurm-h100")
    doc = load_prometheus(spec)
    gpu_nodes = [n for n in resolve_nodes(spec) if n.hardware.gpu is not None]
    assert len(gpu_nodes) == 64
    assert targets(doc, "dcgm-exporter") == [f"{n.name}:9400" for n in gpu_nodes]
    # Each target is a node that gets the dcgm-exporter unit, listening on that port.
    for n in gpu_nodes[:1] + gpu_nodes[-1:]:
        unit = {f.path: str(f.content) for f in nvidia.nvidia_files(spec, n, SECRETS)}[nvidia.DCGM_EXPORTER_UNIT]
        assert f"-a :{spec.dcgm.exporter_port}" in unit
    groups = {sc["labels"]["node_group"] for j in doc["scrape_configs"] for sc in j["static_configs"]}
    assert {"gpu", "mig"} <= groups


def test_no_dcgm_job_where_no_host_exporter() -> None:
    # The GPU Operator runs dcgm-exporter (no host DCGM then). Lab: DCGM is off, no GPUs.
    def operator_exporter(d: dict[str, Any]) -> None:
        d["kubernetes"]["gpu_operator"].update(dcgm_exporter=True)
        d["dcgm"] = {"enabled": False, "exporter": False}

    assert targets(load_prometheus(variant("k8s-gpu-operator", operator_exporter)), "dcgm-exporter") == []
    assert targets(load_prometheus(inventory("lab")), "dcgm-exporter") == []
    host = inventory("k8s-gpu-operator")  # the example: host DCGM and its exporter on the 10 GPU workers
    assert len(targets(load_prometheus(host), "dcgm-exporter")) == 10


def test_ports_follow_the_spec() -> None:
    def change(d: dict[str, Any]) -> None:
        d["monitoring"].update(node_exporter_port=9200, prometheus_port=9091, retention="90d")
        d["dcgm"]["exporter_port"] = 9500

    spec = variant("slurm-h100", change)
    doc = load_prometheus(spec)
    assert all(t.endswith(":9200") for t in targets(doc, "node-exporter"))
    assert all(t.endswith(":9500") for t in targets(doc, "dcgm-exporter"))
    assert targets(doc, "prometheus") == ["mon01:9091"]
    assert targets(doc, "alertmanager") == ["mon01:9093"]
    files = files_of(spec, "mon01")
    assert args_of(files[mon.PROMETHEUS_DEFAULTS]) == [
        "--web.listen-address=:9091",
        "--storage.tsdb.retention.time=90d",
    ]
    assert args_of(files[mon.NODE_EXPORTER_DEFAULTS]) == [
        "--web.listen-address=:9200",
        "--collector.textfile.directory=/var/lib/gpuforge/textfile",
    ]


def test_node_exporter_off() -> None:
    spec = variant("slurm-h100", lambda d: d["monitoring"].update(node_exporter=False))
    assert targets(load_prometheus(spec), "node-exporter") == []
    assert mon.NODE_EXPORTER_DEFAULTS not in files_of(spec, "gpu001")


DASHBOARDS = {f"{mon.DASHBOARD_DIR}/{n}.json" for n in ("cluster-overview", "gpu-node", "slurm-queue")}
PROM_FILES = {mon.PROMETHEUS_CONFIG, mon.PROMETHEUS_DEFAULTS, mon.PROMETHEUS_RULES} | DASHBOARDS
AM_FILES = {mon.ALERTMANAGER_CONFIG, mon.ALERTMANAGER_DEFAULTS}


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_which_node_gets_what(inv: str) -> None:
    spec = inventory(inv)
    slurm = spec.slurm is not None
    for n in resolve_nodes(spec):
        expected = {mon.NODE_EXPORTER_DEFAULTS}
        if n.has(mon.Role.MONITORING):
            expected |= PROM_FILES | AM_FILES
        if slurm and n.roles & {Role.CONTROLLER, Role.ACCOUNTING_DB}:
            expected |= {*mon.SLURM_METRICS_FILES, mon.SLURM_METRICS_PROGRAM}
        if slurm and n.roles & {Role.CONTROLLER, Role.COMPUTE}:
            expected |= set(mon.HEALTH_METRICS_FILES)
        assert set(files_of(spec, n.name)) == expected, n.name


def test_health_metrics_where_the_health_layer_runs() -> None:
    """The health timer is rendered exactly where the health program is (no second role list)."""
    spec = inventory("slurm-h100")
    for n in resolve_nodes(spec):
        timer = {p for p in files_of(spec, n.name) if p in set(mon.HEALTH_METRICS_FILES)}
        assert bool(timer) == (any("health" in ROLE_DEPLOYS[r] for r in n.roles)), n.name


def test_prometheus_off() -> None:
    spec = variant("slurm-h100", lambda d: d["monitoring"].update(prometheus=False))
    assert set(files_of(spec, "mon01")) == {mon.NODE_EXPORTER_DEFAULTS}


def test_alertmanager_off() -> None:
    spec = variant("slurm-h100", lambda d: d["monitoring"].update(alertmanager=False))
    assert set(files_of(spec, "mon01")) == {mon.NODE_EXPORTER_DEFAULTS} | PROM_FILES
    doc = load_prometheus(spec)
    assert "alerting" not in doc and targets(doc, "alertmanager") == []


def test_collector_units() -> None:
    spec = inventory("slurm-h100")
    ctl = files_of(spec, "ctl01")
    db = files_of(spec, "db01")
    assert (
        "gpuforge-slurm-metrics --queue --out=/var/lib/gpuforge/textfile/slurm.prom --daemons=slurmctld\n"
        in ctl["/etc/systemd/system/gpuforge-slurm-metrics.service"]
    )
    assert (
        "gpuforge-slurm-metrics --out=/var/lib/gpuforge/textfile/slurm.prom --daemons=slurmdbd\n"
        in db["/etc/systemd/system/gpuforge-slurm-metrics.service"]
    )
    service = files_of(spec, "gpu001")["/etc/systemd/system/gpuforge-health-metrics.service"]
    assert (
        "ExecStart=/usr/bin/timeout 55 /usr/local/sbin/gpuforge-health --no-slurm "
        "--prom /var/lib/gpuforge/textfile/gpuforge-health.prom\n" in service
    )
    timer = files_of(spec, "gpu001")["/etc/systemd/system/gpuforge-health-metrics.timer"]
    assert "OnUnitActiveSec=60\n" in timer
    fast = variant("slurm-h100", lambda d: d["monitoring"].update(slurm_collector_interval=15))
    assert "OnUnitActiveSec=15\n" in files_of(fast, "ctl01")["/etc/systemd/system/gpuforge-slurm-metrics.timer"]
    assert "timeout 10 " in files_of(fast, "ctl01")["/etc/systemd/system/gpuforge-slurm-metrics.service"]


def test_nodes_collector_timers_start_spread_over_the_interval() -> None:
    """64 GPU nodes whose timers start together (one apply, one power-on) first run at 10 s plus a
    share of the interval fixed by each node's name: spread over the minute, not in one second,
    and the same on every render."""
    spec = inventory("slurm-h100")
    unit = "/etc/systemd/system/gpuforge-health-metrics.timer"
    gpus = [n.name for n in resolve_nodes(spec) if n.name.startswith("gpu")]
    firsts = {}
    for name in gpus:
        timer = files_of(spec, name)[unit]
        (line,) = [ln for ln in timer.splitlines() if ln.startswith("OnActiveSec=")]
        firsts[name] = int(line.split("=")[1])
        assert firsts[name] == mon.first_run_s(name, mon.HEALTH_METRICS_UNIT, 60)
        assert 10 <= firsts[name] < 70 and "OnUnitActiveSec=60\n" in timer
    assert len(gpus) == 64 and len(set(firsts.values())) >= 30  # 64 nodes over 60 seconds
    assert max(sum(1 for v in firsts.values() if v == s) for s in set(firsts.values())) <= 5
    assert files_of(spec, "gpu007")[unit] == files_of(inventory("slurm-h100"), "gpu007")[unit]
    # Each unit has its own phase on a node (the Slurm collector and the health timer of ctl01).
    assert mon.first_run_s("ctl01", mon.SLURM_METRICS_UNIT, 60) != mon.first_run_s("ctl01", mon.HEALTH_METRICS_UNIT, 60)


def rules_of(spec: Spec) -> dict[str, list[dict[str, Any]]]:
    doc = yaml.safe_load(files_of(spec, monitoring_node(spec))[mon.PROMETHEUS_RULES])
    out: dict[str, list[dict[str, Any]]] = {}
    for group in doc["groups"]:
        for rule in group["rules"]:
            out.setdefault(rule["alert"], []).append(rule)
    return out


def test_alert_rules_follow_the_spec() -> None:
    rules = rules_of(inventory("slurm-h100"))
    critical = [str(x) for x in CRITICAL_XIDS]  # the Xid table's critical rows (tests/validator/test_xid_catalog.py)
    assert [r["labels"]["xid"] for r in rules["GpuXidError"]] == critical
    assert all(r["annotations"]["runbook"] for rs in rules.values() for r in rs)
    assert all(r["labels"]["component"] == "gpu" for name, rs in rules.items() if name.startswith("Gpu") and
               not name.startswith("Gpuforge") for r in rs)  # fmt: skip

    def change(d: dict[str, Any]) -> None:
        d["monitoring"]["alerts"] = {
            "gpu_temp_c": 80,
            "gpu_power_w": 650,
            "xids": [13, 79, 31],
            "check_failing_minutes": 3,
            "operator_reasons": ["admin (", "x|y"],
        }

    rules = rules_of(variant("slurm-h100", change))
    assert [r["labels"]["xid"] for r in rules["GpuXidError"]] == [*critical, "13", "31"]
    assert rules["GpuTemperatureHigh"][0]["expr"] == "DCGM_FI_DEV_GPU_TEMP > 80"
    assert rules["GpuPowerHigh"][0]["expr"] == "DCGM_FI_DEV_POWER_USAGE > 650"
    assert rules["GpuforgeCheckFailing"][0]["for"] == "3m"
    # The reasons are RE2 literals (a backslash before each meta character) inside a PromQL string
    # literal, whose own escape doubles each backslash: promtool refuses a lone "\(".
    assert rules["SlurmNodeUnavailable"][0]["expr"] == (
        'gpuforge_slurm_node_state{state=~"drain|down",reason!~"(admin \\\\(|x\\\\|y).*"} == 1'
    )


def test_rule_groups_by_what_the_cluster_has() -> None:
    assert set(rules_of(inventory("lab"))) == {
        "NodeDown", "DiskNearlyFull", "GpuforgeCheckFailing", "GpuforgeConfigDrift", "GpuforgeRestartPending",
        "SlurmNodeUnavailable", "SlurmctldDown", "SlurmdbdDown"
    }  # fmt: skip
    k8s = rules_of(inventory("k8s-gpu-operator"))
    assert "NodeDown" in k8s and "GpuXidError" in k8s and "SlurmctldDown" not in k8s


def test_alertmanager_receivers_and_inhibition() -> None:
    def change(d: dict[str, Any]) -> None:
        d["monitoring"].update(
            receivers=[
                {"name": "pager", "webhook_url": "https://hooks.example.org/gpu"},
                {"name": "ops", "email": "ops@example.org", "webhook_url": "http://10.0.0.5:8080/"},
            ],
            smtp_smarthost="smtp.example.org:25",
            smtp_from="gpuforge@example.org",
            group_wait="5s",
        )

    spec = variant("slurm-h100", change)
    files = {
        f.path: f
        for f in mon.monitoring_files(spec, next(n for n in resolve_nodes(spec) if n.name == "mon01"), SECRETS)
    }
    assert (files[mon.ALERTMANAGER_CONFIG].mode, files[mon.ALERTMANAGER_CONFIG].group) == ("0640", "prometheus")
    doc = yaml.safe_load(str(files[mon.ALERTMANAGER_CONFIG].content))
    assert doc == {
        "global": {"smtp_smarthost": "smtp.example.org:25", "smtp_from": "gpuforge@example.org"},
        "route": {
            "receiver": "gpuforge-all",
            "group_by": ["alertname", "cluster", "node"],
            "group_wait": "5s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
        "receivers": [
            {
                "name": "gpuforge-all",
                "webhook_configs": [
                    {"url": "https://hooks.example.org/gpu", "send_resolved": True},
                    {"url": "http://10.0.0.5:8080/", "send_resolved": True},
                ],
                "email_configs": [{"to": "ops@example.org", "send_resolved": True}],
            }
        ],
        "inhibit_rules": [
            {
                "source_matchers": ['alertname="NodeDown"'],
                "target_matchers": ['component="gpu"'],
                "equal": ["cluster", "node"],
            }
        ],
    }
    assert args_of(str(files[mon.ALERTMANAGER_DEFAULTS].content)) == [
        "--config.file=/etc/prometheus/alertmanager.yml",
        "--web.listen-address=:9093",
        "--cluster.listen-address=",
    ]


@pytest.mark.parametrize(
    ("receivers", "extra", "message"),
    [
        ([{"name": "m", "email": "a@example.org"}], {}, "receiver 'm' sends e-mail: set smtp_smarthost and smtp_from"),
        ([{"name": "w"}], {}, "receiver 'w' has neither webhook_url nor email"),
        ([{"name": "w", "webhook_url": "ftp://x"}], {}, "must be an http:// or https:// URL"),
        (
            [{"name": "w", "webhook_url": "http://x/"}, {"name": "w", "webhook_url": "http://y/"}],
            {},
            "receiver names must be unique: w",
        ),
    ],
)
def test_bad_receivers_are_spec_errors(receivers: list[dict[str, str]], extra: dict[str, str], message: str) -> None:
    with pytest.raises(SpecError) as e:
        variant("slurm-h100", lambda d: d["monitoring"].update(receivers=receivers, **extra))
    assert message in str(e.value) and "monitoring" in str(e.value)


def datasources(v: Any) -> list[str]:
    """Every ``datasource`` value anywhere in a JSON document."""
    if isinstance(v, dict):
        return [str(x) for k, x in v.items() if k == "datasource"] + [d for x in v.values() for d in datasources(x)]
    if isinstance(v, list):
        return [d for x in v for d in datasources(x)]
    return []


def test_dashboards_use_the_spec_datasource() -> None:
    spec = variant("slurm-h100", lambda d: d["monitoring"].update(grafana_datasource="site-prom"))
    files = files_of(spec, "mon01")
    for path in DASHBOARDS:
        doc = json.loads(files[path])
        found = datasources(doc)
        assert found and set(found) == {"site-prom"}, path
        assert mon.dashboard_exprs(doc), path


def test_promql_regex_escape() -> None:
    assert alert_rules.promql_regex_escape("gpuforge: health: a.b (x|y) [1]") == (
        "gpuforge: health: a\\.b \\(x\\|y\\) \\[1\\]"
    )


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_deterministic(inv: str) -> None:
    def render(spec: Spec) -> list[tuple[str, str, bytes]]:
        return [(n.name, f.path, f.data) for n in resolve_nodes(spec) for f in mon.monitoring_files(spec, n, SECRETS)]

    first = render(inventory(inv))
    assert first == render(inventory(inv))
    assert all(data.endswith(b"\n") for _, _, data in first)

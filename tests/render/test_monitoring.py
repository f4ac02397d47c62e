"""Monitoring renderers: Prometheus scrape config and exporter arguments, consistent with
the exporters the NVIDIA layer sets up."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml

from gpuforge.render import monitoring as mon
from gpuforge.render import nvidia
from gpuforge.render.files import Secrets
from gpuforge.spec import resolve_nodes
from gpuforge.spec.model import Spec
from tests.helpers import inventory, variant

SECRETS = Secrets.redacted()
INVENTORY_NAMES = ("slurm-h100", "k8s-gpu-operator", "lab")

# Prometheus configuration rules (prometheus.io/docs/prometheus/latest/configuration/configuration/).
DURATION = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TARGET = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$")
GLOBAL_KEYS = {"scrape_interval", "scrape_timeout", "evaluation_interval", "external_labels"}
SCRAPE_KEYS = {"job_name", "scrape_interval", "scrape_timeout", "metrics_path", "scheme", "static_configs"}


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
    assert set(doc) <= {"global", "scrape_configs"}
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
    groups = {sc["labels"]["group"] for j in doc["scrape_configs"] for sc in j["static_configs"] if "labels" in sc}
    assert {"gpu", "mig"} <= groups


def test_no_dcgm_job_where_no_host_exporter() -> None:
    # Kubernetes example: the GPU Operator runs dcgm-exporter. Lab: DCGM is off, no GPUs.
    assert targets(load_prometheus(inventory("k8s-gpu-operator")), "dcgm-exporter") == []
    assert targets(load_prometheus(inventory("lab")), "dcgm-exporter") == []
    host = variant("k8s-gpu-operator", lambda d: d["kubernetes"]["gpu_operator"].update(dcgm_exporter=False))
    assert len(targets(load_prometheus(host), "dcgm-exporter")) == 10


def test_ports_follow_the_spec() -> None:
    def change(d: dict[str, Any]) -> None:
        d["monitoring"].update(node_exporter_port=9200, prometheus_port=9091, retention="90d")
        d["dcgm"]["exporter_port"] = 9500

    spec = variant("slurm-h100", change)
    doc = load_prometheus(spec)
    assert all(t.endswith(":9200") for t in targets(doc, "node-exporter"))
    assert all(t.endswith(":9500") for t in targets(doc, "dcgm-exporter"))
    assert targets(doc, "prometheus") == ["localhost:9091"]
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


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_which_node_gets_what(inv: str) -> None:
    spec = inventory(inv)
    for n in resolve_nodes(spec):
        expected = {mon.NODE_EXPORTER_DEFAULTS}
        if n.has(mon.Role.MONITORING):
            expected |= {mon.PROMETHEUS_CONFIG, mon.PROMETHEUS_DEFAULTS}
        assert set(files_of(spec, n.name)) == expected, n.name


def test_prometheus_off() -> None:
    spec = variant("slurm-h100", lambda d: d["monitoring"].update(prometheus=False))
    assert set(files_of(spec, "mon01")) == {mon.NODE_EXPORTER_DEFAULTS}


@pytest.mark.parametrize("inv", INVENTORY_NAMES)
def test_deterministic(inv: str) -> None:
    def render(spec: Spec) -> list[tuple[str, str, bytes]]:
        return [(n.name, f.path, f.data) for n in resolve_nodes(spec) for f in mon.monitoring_files(spec, n, SECRETS)]

    first = render(inventory(inv))
    assert first == render(inventory(inv))
    assert all(data.endswith(b"\n") for _, _, data in first)

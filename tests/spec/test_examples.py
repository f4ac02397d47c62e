"""The example inventories, the JSON Schema of spec files, and spec diffs with update policies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from gpuforge.spec import Role, Scheduler, Spec, load_spec, parse_spec, resolve_nodes, spec_json_schema
from gpuforge.spec.diff import diff_specs, field_policy
from gpuforge.spec.policy import POLICY_KEY, UpdatePolicy
from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "inventories"
EXAMPLES = ["lab", "slurm-h100", "k8s-gpu-operator"]
POLICIES = {"live", "rolling", "rebuild"}
ENV = {**os.environ, "COLUMNS": "1000", "NO_COLOR": "1"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120
    )


def example(name: str) -> Spec:
    return load_spec(INVENTORIES / f"{name}.yaml")


def example_data(name: str) -> dict[str, Any]:
    data = yaml.safe_load((INVENTORIES / f"{name}.yaml").read_text(encoding="utf-8"))
    # A JSON round trip un-shares YAML anchors (slurm-h100's two GPU groups share *hgx),
    # so a change made to one group stays in that group.
    return json.loads(json.dumps(data))


def variant(name: str, change: Callable[[dict[str, Any]], None]) -> Spec:
    data = example_data(name)
    change(data)
    return parse_spec(yaml_text.dump(data), f"{name}-variant.yaml")


@cache
def cli_schema() -> dict[str, Any]:
    result = cli("schema")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_loads(name: str) -> None:
    spec = example(name)
    assert isinstance(spec, Spec)


@pytest.mark.parametrize(
    ("name", "scheduler", "nodes"),
    [("lab", "slurm", 3), ("slurm-h100", "slurm", 69), ("k8s-gpu-operator", "kubernetes", 14)],
)
def test_check_accepts_example(name: str, scheduler: str, nodes: int) -> None:
    result = cli("check", f"inventories/{name}.yaml")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"OK ({scheduler} cluster" in result.stdout
    assert f"{nodes} nodes)" in result.stdout
    doc = json.loads(cli("check", "--json", f"inventories/{name}.yaml").stdout)
    assert {k: doc[k] for k in ("ok", "cluster", "nodes")} == {"ok": True, "cluster": example(name).cluster.name,
                                                              "nodes": nodes}  # fmt: skip
    assert isinstance(doc["warnings"], list)  # outside NVIDIA's support matrix: reported, not refused


def _role_counts(spec: Spec) -> Counter[Role]:
    return Counter(role for node in resolve_nodes(spec) for role in node.roles)


def test_lab_nodes() -> None:
    spec = example("lab")
    nodes = resolve_nodes(spec)
    assert [n.name for n in nodes] == ["node1", "node2", "node3"]
    assert [n.address for n in nodes] == ["10.213.0.11", "10.213.0.12", "10.213.0.13"]
    assert spec.cluster.scheduler is Scheduler.SLURM
    roles = _role_counts(spec)
    assert roles[Role.COMPUTE] == 3
    assert roles[Role.CONTROLLER] == roles[Role.ACCOUNTING_DB] == 1
    assert all(n.hardware.gpu_count == 0 for n in nodes)


def test_slurm_h100_nodes() -> None:
    spec = example("slurm-h100")
    nodes = resolve_nodes(spec)
    assert len(nodes) == 69
    roles = _role_counts(spec)
    assert roles[Role.COMPUTE] == 64
    assert roles[Role.LOGIN] == 2
    assert roles[Role.CONTROLLER] == roles[Role.ACCOUNTING_DB] == roles[Role.MONITORING] == 1
    assert sum(n.hardware.gpu_count for n in nodes) == 512
    by_name = {n.name: n for n in nodes}
    assert by_name["gpu001"].address == "192.0.2.101"
    assert by_name["gpu060"].address == "192.0.2.160"
    assert by_name["gpu064"].address == "192.0.2.164"
    assert by_name["gpu032"].leaf_switch == "leaf1"
    assert by_name["gpu033"].leaf_switch == "leaf2"
    assert by_name["gpu064"].leaf_switch == "leaf2"
    assert by_name["gpu064"].mig_config == "inference"
    assert by_name["gpu001"].mig_config is None
    assert by_name["ctl01"].os.value == "ubuntu24.04"


def test_k8s_nodes() -> None:
    spec = example("k8s-gpu-operator")
    nodes = resolve_nodes(spec)
    assert len(nodes) == 14
    roles = _role_counts(spec)
    assert roles[Role.K8S_CONTROL_PLANE] == 3
    assert roles[Role.K8S_WORKER] == 11
    assert sum(n.hardware.gpu_count for n in nodes if n.has(Role.K8S_WORKER)) == 80
    assert spec.slurm is None and spec.kubernetes is not None


# --------------------------------------------------------------------------- JSON Schema


def test_schema_cli_matches_library() -> None:
    assert cli_schema() == json.loads(json.dumps(spec_json_schema()))


def test_schema_output_file(tmp_path: Path) -> None:
    out = tmp_path / "spec.schema.json"
    result = cli("schema", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == cli_schema()


def test_schema_is_valid_draft_2020_12() -> None:
    Draft202012Validator.check_schema(cli_schema())


def _models(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "Spec", schema
    for name, definition in schema.get("$defs", {}).items():
        if definition.get("type") == "object" or "properties" in definition:
            yield name, definition


def test_every_property_carries_an_update_policy() -> None:
    schema = cli_schema()
    seen = 0
    missing = []
    for model, definition in _models(schema):
        for prop, body in definition.get("properties", {}).items():
            seen += 1
            if body.get(POLICY_KEY) not in POLICIES:
                missing.append(f"{model}.{prop}: {body.get(POLICY_KEY)!r}")
    assert not missing, missing
    assert seen > 100
    # Every model of the spec is in $defs (nothing is inlined without its properties checked).
    assert {"Cluster", "NodeGroup", "Partition", "Qos", "Account", "MigDevices", "Tenant", "Slurm"} <= set(
        schema["$defs"]
    )


def test_schema_policies_are_the_declared_ones() -> None:
    """x-update-policy in the schema is what the model declares and what field_policy reports."""
    schema = cli_schema()
    assert schema["properties"]["cluster"][POLICY_KEY] == "rebuild"
    assert schema["$defs"]["Cluster"]["properties"]["name"][POLICY_KEY] == "rebuild"
    assert schema["$defs"]["Partition"]["properties"]["max_time"][POLICY_KEY] == "live"
    assert schema["$defs"]["Driver"]["properties"]["version"][POLICY_KEY] == "rolling"
    assert schema["$defs"]["NodeGroup"]["properties"]["roles"][POLICY_KEY] == "rebuild"
    for field, info in Spec.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        assert schema["properties"][field][POLICY_KEY] == extra[POLICY_KEY]
        assert field_policy((field,)).value == extra[POLICY_KEY]


def test_schema_descriptions_say_how_a_change_applies() -> None:
    schema = cli_schema()
    body = schema["$defs"]["Driver"]["properties"]["version"]
    assert "rolling" in body["description"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_validates_against_schema(name: str) -> None:
    validator = Draft202012Validator(cli_schema())
    errors = sorted(validator.iter_errors(example_data(name)), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["cluster"].update(scheduler="pbs"), ["cluster", "scheduler"]),
        (lambda d: d["cluster"].update(nmae="x"), ["cluster"]),
        (lambda d: d["slurm"]["partitions"][0].update(max_time="2 days"), ["slurm", "partitions", 0, "max_time"]),
        (lambda d: d["node_groups"][0].pop("hosts"), ["node_groups", 0]),
        (lambda d: d["node_groups"][0].update(name="Bad"), ["node_groups", 0, "name"]),
    ],
    ids=["enum", "unknown-field", "slurm-time", "required", "name-pattern"],
)
def test_schema_refuses_field_errors(change: Callable[[dict[str, Any]], None], where: list[Any]) -> None:
    data = example_data("lab")
    change(data)
    errors = list(Draft202012Validator(cli_schema()).iter_errors(data))
    assert errors
    # An error under an anyOf (e.g. slurm: Slurm | null) sits in the context of the anyOf error.
    paths = [list(e.absolute_path) for e in _flatten(errors)]
    assert any(path[: len(where)] == where for path in paths), paths


def _flatten(errors: list[Any]) -> Iterator[Any]:
    for error in errors:
        yield error
        yield from _flatten(list(error.context or []))


# --------------------------------------------------------------------------- diffs and policies


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data
        for part in path[:-1]:
            target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
        target[path[-1]] = value

    return change


def test_no_change_no_diff() -> None:
    assert diff_specs(example("slurm-h100"), example("slurm-h100")) == []


@pytest.mark.parametrize(
    ("path", "value", "diff_path", "policy"),
    [
        (["slurm", "partitions", 0, "max_time"], "3-00:00:00", "slurm.partitions.gpu.max_time", "live"),
        (["versions", "driver", "version"], "580.167.08", "versions.driver.version", "rolling"),
        (["cluster", "name"], "hopper2", "cluster.name", "rebuild"),
        (["cluster", "domain"], "example.net", "cluster.domain", "live"),
        (["node_groups", 4, "roles"], ["compute", "login"], "node_groups.gpu.roles", "rebuild"),
        (
            ["node_groups", 4, "hardware", "real_memory_mb"],
            1000000,
            "node_groups.gpu.hardware.real_memory_mb",
            "rolling",
        ),
        (["slurm", "accounting", "database"], "acct", "slurm.accounting.database", "rebuild"),
        (["slurm", "qos", 1, "priority"], 2000, "slurm.qos.high.priority", "live"),
        (["mig", "configs", "inference", 0, "mig_devices"], {"2g.20gb": 3}, "mig.configs.inference[0]", "rolling"),
    ],
)
def test_diff_policy(path: list[Any], value: Any, diff_path: str, policy: str) -> None:
    old = example("slurm-h100")
    new = variant("slurm-h100", _set(path, value))
    changes = diff_specs(old, new)
    assert changes, "a change is reported"
    assert all(c.path.startswith(diff_path) for c in changes), [c.path for c in changes]
    assert {c.policy for c in changes} == {UpdatePolicy(policy)}


def test_diff_reports_each_change_with_old_and_new() -> None:
    old = example("slurm-h100")
    new = variant(
        "slurm-h100",
        lambda d: (
            d["slurm"]["partitions"][0].update(max_time="3-00:00:00"),
            d["versions"]["driver"].update(version="580.167.08"),
            d["cluster"].update(name="hopper2"),
        ),
    )
    changes = {c.path: c for c in diff_specs(old, new)}
    assert set(changes) == {"slurm.partitions.gpu.max_time", "versions.driver.version", "cluster.name"}
    assert changes["slurm.partitions.gpu.max_time"].old == "2-00:00:00"
    assert changes["slurm.partitions.gpu.max_time"].new == "3-00:00:00"
    assert changes["slurm.partitions.gpu.max_time"].policy is UpdatePolicy.LIVE
    assert changes["versions.driver.version"].policy is UpdatePolicy.ROLLING
    assert changes["cluster.name"].policy is UpdatePolicy.REBUILD
    assert max(c.policy.rank for c in changes.values()) == UpdatePolicy.REBUILD.rank


def test_field_policy_paths() -> None:
    assert field_policy(("slurm", "partitions", "gpu", "max_time")) is UpdatePolicy.LIVE
    assert field_policy(("versions", "driver", "version")) is UpdatePolicy.ROLLING
    assert field_policy(("cluster", "name")) is UpdatePolicy.REBUILD
    # The deepest declared field decides: cluster is rebuild, its domain is live.
    assert field_policy(("cluster", "domain")) is UpdatePolicy.LIVE
    assert field_policy(("node_groups", "gpu", "hardware", "gpu", "model")) is UpdatePolicy.ROLLING
    assert field_policy(("node_groups", 0, "roles")) is UpdatePolicy.REBUILD


def test_adding_a_partition_is_live() -> None:
    old = example("slurm-h100")
    new = variant(
        "slurm-h100",
        lambda d: d["slurm"]["partitions"].append({"name": "long", "nodes": "gpu", "max_time": "7-00:00:00"}),
    )
    changes = diff_specs(old, new)
    assert [c.path for c in changes] == ["slurm.partitions.long"]
    assert changes[0].old is None
    assert changes[0].policy is UpdatePolicy.LIVE


@pytest.mark.parametrize("group", ["hosts", "roles", "name"])
def test_field_policy_is_not_confused_by_item_names(group: str) -> None:
    def rename(d: dict[str, Any]) -> None:
        d["node_groups"][4]["name"] = group
        d["slurm"]["partitions"][0]["nodes"] = group

    old = variant("slurm-h100", rename)
    new = variant("slurm-h100", lambda d: (rename(d), d["node_groups"][4]["hardware"].update(real_memory_mb=1000000)))
    (change,) = diff_specs(old, new)
    assert change.path == f"node_groups.{group}.hardware.real_memory_mb"
    assert change.policy is UpdatePolicy.ROLLING

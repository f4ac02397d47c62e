"""Node hardware is the node's: refused without figures, warned when implausible, discovered from a facts file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.spec import SpecError, load_spec, parse_spec
from gpuforge.spec.discovered import apply_discovered, facts_path, group_figures
from gpuforge.spec.gpus import GPU_MODELS
from gpuforge.spec.hardware_rules import hardware_warnings, slurm_real_memory, unknown_hardware
from tests import yaml_text

HGX = {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "real_memory_mb": 2000000}


def spec_data(gpu_hw: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    hw = {"gpu": {"model": "H100-80GB", "count": 8}, **(HGX if gpu_hw is None else gpu_hw)}
    return {
        "cluster": {"name": "t", "scheduler": "slurm", "os": "ubuntu24.04"},
        "versions": {"driver": {"version": "580.105.08", "flavor": "open", "source": "nvidia"}},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "roles": ["controller"]},
            {"name": "login", "hosts": "login1", "roles": ["login"]},
            {"name": "gpu", "hosts": "gpu[1-2]", "roles": ["compute"], "hardware": hw},
        ],
        "slurm": {"accounting": {"enabled": False}, "partitions": [{"name": "b", "nodes": "gpu"}]},
        **more,
    }


def parse(data: dict[str, Any]) -> Any:
    return parse_spec(yaml_text.dump(data))


def issues(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse(data)
    return [f"{i.path}: {i.message}" for i in info.value.issues]


def test_a_slurmd_group_without_figures_is_refused_naming_each_field() -> None:
    found = issues(spec_data({"threads_per_core": 2}))
    assert [line.split(":")[0] for line in found] == [
        "node_groups[2].hardware.cores_per_socket",
        "node_groups[2].hardware.real_memory_mb",
        "node_groups[2].hardware.sockets",
    ]
    assert "gpu runs slurmd" in found[0] and "discover: true" in found[0]


def test_groups_without_slurmd_need_no_figures_and_discover_is_accepted() -> None:
    spec = parse(spec_data({"discover": True}))
    assert unknown_hardware(spec) == ["gpu"]
    assert [w.message for w in hardware_warnings(spec)] == [
        "gpu: discover: true and no figures discovered yet: run gpuforge discover SPEC first"
    ]
    assert not parse(spec_data()).node_groups[0].hardware.model_fields_set  # the controller states nothing


def test_the_update_policy_of_the_figures_is_rolling() -> None:
    from gpuforge.spec import spec_json_schema

    props = spec_json_schema()["$defs"]["Hardware"]["properties"]
    assert {k: props[k]["x-update-policy"] for k in ("discover", *HGX)} == dict.fromkeys(("discover", *HGX), "rolling")


def test_sixteen_h100_in_a_node_is_a_warning_citing_the_largest_hgx() -> None:
    data = spec_data()
    data["node_groups"][2]["hardware"]["gpu"]["count"] = 16
    warnings = hardware_warnings(parse(data))
    assert [(w.path, w.message) for w in warnings] == [
        ("node_groups[2].hardware.gpu.count",
         "16 x H100-80GB in one node: NVIDIA's largest H100-80GB node has 8 (a typo?)"),
    ]  # fmt: skip
    assert GPU_MODELS["H100-80GB"].citations("max") and GPU_MODELS["GB200"].max_per_node == 4


def test_memory_below_the_gpus_own_is_a_warning() -> None:
    warnings = hardware_warnings(parse(spec_data({**HGX, "real_memory_mb": 2048})))
    assert [w.path for w in warnings] == ["node_groups[2].hardware.real_memory_mb"]
    assert "2048 MiB for 8 x H100-80GB (80 GB each)" in warnings[0].message
    assert "640000 MB" in warnings[0].message
    assert not hardware_warnings(parse(spec_data()))  # 2 TB for 640 GB of GPU memory


def test_check_prints_the_warnings_and_exits_0(tmp_path: Path) -> None:
    data = spec_data()
    data["node_groups"][2]["hardware"]["gpu"]["count"] = 16
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text.dump(data))
    cp = subprocess.run([sys.executable, "-m", "gpuforge", "check", str(path)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    assert "warning: node_groups[2].hardware.gpu.count: 16 x H100-80GB in one node" in cp.stderr


def test_the_margin_keeps_realmemory_below_what_slurmd_reports() -> None:
    assert slurm_real_memory(24105) == 23622
    assert slurm_real_memory(2063760) == 2022484
    assert all(slurm_real_memory(m) < m for m in (100, 1000, 24105, 2063760))


def write_facts(spec_path: Path, nodes: dict[str, dict[str, int]]) -> None:
    facts_path(spec_path).write_text(json.dumps({"format": 1, "cluster": "t", "nodes": nodes}))


def node_facts(memory_mb: int = 2063760, sockets: int = 2) -> dict[str, int]:
    return {"sockets": sockets, "cores_per_socket": 56, "threads_per_core": 2, "memory_mb": memory_mb}


def test_a_discovered_group_takes_the_nodes_figures_with_the_margin(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data({"discover": True})))
    assert facts_path(path) == tmp_path / "cluster.hardware.json"
    write_facts(path, {"gpu1": node_facts(2063760), "gpu2": node_facts(2063000)})
    hw = load_spec(path).node_groups[2].hardware
    assert (hw.sockets, hw.cores_per_socket, hw.threads_per_core) == (2, 56, 2)
    assert hw.real_memory_mb == slurm_real_memory(2063000) == 2021740  # the smaller node, less 2%
    assert not hw.missing_figures and hw.discover and hw.gpu is not None


def test_a_group_partly_discovered_stays_unknown(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data({"discover": True})))
    write_facts(path, {"gpu1": node_facts()})
    assert unknown_hardware(load_spec(path)) == ["gpu"]


def test_nodes_of_one_group_that_differ_are_refused_naming_them(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data({"discover": True})))
    write_facts(path, {"gpu1": node_facts(), "gpu2": node_facts(sockets=1)})
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.issues[0].path == "node_groups[2].hardware"
    assert "differ in sockets x cores x threads (2x56x2 on gpu1; 1x56x2 on gpu2)" in info.value.issues[0].message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a facts file (JSON)"),
        ('{"format": 9, "nodes": {}}', "not a facts file of format 1"),
        ('{"format": 1, "nodes": {"gpu1": {"sockets": true}, "gpu2": {}}}', "gpu1: its facts have no whole"),
        ('{"format": 1, "nodes": {"gpu1": {"sockets": 99, "cores_per_socket": 1, "threads_per_core": 1, '
         '"memory_mb": 5000}, "gpu2": {"sockets": 99, "cores_per_socket": 1, "threads_per_core": 1, '
         '"memory_mb": 5000}}}', "the discovered figures do not fit: sockets"),
    ],
)  # fmt: skip
def test_a_bad_facts_file_is_a_spec_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data({"discover": True})))
    facts_path(path).write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in info.value.format()


def test_no_facts_file_is_read_without_a_discover_group(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data()))
    facts_path(path).write_text("not json")
    spec = load_spec(path)
    assert apply_discovered(spec, path) is spec


def test_group_figures_needs_every_node() -> None:
    assert group_figures(["a", "b"], {"a": node_facts()}) is None
    assert group_figures(["a"], {"a": node_facts(1000)}) == {
        "sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "real_memory_mb": 980}  # fmt: skip


@pytest.mark.parametrize("command", ["render", "plan", "apply"])
def test_render_plan_and_apply_refuse_an_undiscovered_group(tmp_path: Path, command: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml_text.dump(spec_data({"discover": True})))
    extra = {"render": ["-o", str(tmp_path / "out")], "plan": [], "apply": ["--yes"]}[command]
    cp = subprocess.run(
        [sys.executable, "-m", "gpuforge", command, str(path), *extra], capture_output=True, text=True, timeout=120
    )
    assert cp.returncode == 2, cp.stderr
    assert f"node group(s) gpu have discover: true and no discovered figures: run gpuforge discover {path} first" in (
        " ".join(cp.stderr.split())
    )
    assert "Traceback" not in cp.stderr

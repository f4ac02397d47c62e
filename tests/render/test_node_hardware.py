"""NodeName lines carry the group's own figures: stated in the spec, or discovered (less the margin)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.render.slurm import node_lines
from gpuforge.spec import load_spec, parse_spec
from tests import yaml_text
from tests.spec.test_hardware import HGX, spec_data


def test_the_readme_hgx_figures_make_the_nodename_line() -> None:
    assert node_lines(parse_spec(yaml_text.dump(spec_data()))) == [
        "NodeName=gpu[1-2] CPUs=224 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 RealMemory=2000000 "
        "Gres=gpu:h100:8 Feature=gpu State=UNKNOWN"
    ]


def test_discovered_figures_make_the_nodename_line_with_the_margin(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text.dump(spec_data({"discover": True})))
    facts = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1}
    nodes = {"gpu1": {**facts, "memory_mb": 24105}, "gpu2": {**facts, "memory_mb": 24200}}
    path.with_name("c.hardware.json").write_text(json.dumps({"format": 1, "cluster": "t", "nodes": nodes}))
    assert node_lines(load_spec(path)) == [
        "NodeName=gpu[1-2] CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=23622 "
        "Gres=gpu:h100:8 Feature=gpu State=UNKNOWN"
    ]  # 24105 MiB (the smaller node) less 2%, rounded down


def test_an_undiscovered_group_has_no_nodename_line_at_all() -> None:
    spec = parse_spec(yaml_text.dump(spec_data({"discover": True})))
    with pytest.raises(
        ValueError, match="node group gpu has no sockets, cores_per_socket, threads_per_core, real_memory_mb"
    ):
        node_lines(spec)
    assert HGX["real_memory_mb"] == 2000000

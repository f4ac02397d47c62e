"""hardware.figures: the live node against the figures of its NodeName line, naming the figure that differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuforge.render import node_health_config
from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.validator.node import execute, framework
from gpuforge.validator.node.base import FAIL, PASS, SKIP
from tests import yaml_text
from tests.facts.test_hardware_probe import hgx
from tests.spec.test_hardware import spec_data

RECORDED = Path(__file__).parents[1] / "facts" / "fixtures" / "platform" / "hardware_vm_2cpu.json"


def config(node: str, **hw: int) -> dict[str, object]:
    figures = {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "real_memory_mb": 2000000, **hw}
    spec = parse_spec(yaml_text.dump(spec_data(figures)))
    return node_health_config(spec, next(n for n in resolve_nodes(spec) if n.name == node))


def figures_result(cfg: dict[str, object], lines: list[str]) -> tuple[str, str]:
    ctx = framework.NodeContext(cfg, {"hardware": lines})
    results, _ = execute.run_node_checks(cfg, ["hardware.figures"], ctx=ctx)
    return results[0].status, results[0].message


def test_the_config_carries_the_nodename_figures_of_slurmd_nodes_only() -> None:
    assert config("gpu1")["hardware"] == {
        "sockets": 2, "cores_per_socket": 56, "threads_per_core": 2, "real_memory_mb": 2000000}  # fmt: skip
    assert "hardware" not in config("ctl1")


def test_an_hgx_node_as_the_spec_says_passes() -> None:
    assert figures_result(config("gpu1"), hgx()) == (
        PASS, "2 x 56 cores x 2 threads, 2063760 MiB (RealMemory 2000000), as the spec says")  # fmt: skip


@pytest.mark.parametrize(
    ("hw", "message"),
    [
        ({"sockets": 4}, "sockets x cores x threads: 448 > 224 (4 x 56 x 2 in the spec, 2 x 56 x 2 on the node)"),
        ({"threads_per_core": 4, "cores_per_socket": 64},
         "sockets x cores x threads: 512 > 224 (2 x 64 x 4 in the spec, 2 x 56 x 2 on the node)"),
        ({"real_memory_mb": 2100000}, "real_memory_mb: the spec says 2100000, the node has 2063760 MiB (Slurm marks"),
    ],
)  # fmt: skip
def test_the_figure_that_differs_is_named(hw: dict[str, int], message: str) -> None:
    status, text = figures_result(config("gpu1", **hw), hgx())
    assert status == FAIL and message in text and "gpuforge discover SPEC" in text


def test_a_node_with_more_than_slurm_is_given_passes_naming_the_extra() -> None:
    """Slurm runs a node with more than its NodeName line (the lab's 1-core line on a 2-core machine)."""
    status, text = figures_result(config("gpu1", sockets=1, threads_per_core=1), hgx())
    assert (status, text) == (
        PASS,
        "sockets x cores x threads: 1 x 56 x 1 in the spec, 2 x 56 x 2 on the node "
        "(more than Slurm is given: gpuforge discover SPEC reads the node's figures)",
    )


def test_the_same_count_in_another_layout_passes_as_slurm_accepts_it() -> None:
    """slurmctld compares sockets*cores*threads (a libvirt VM's 2 sockets x 1 core serve a 1 x 2 line);
    one fewer in the product fails."""
    status, text = figures_result(config("gpu1", sockets=4, cores_per_socket=28), hgx())
    assert status == PASS and "4 x 28 x 2 in the spec, 2 x 56 x 2 on the node (the same count, which Slurm" in text
    status, text = figures_result(config("gpu1", sockets=4, cores_per_socket=29), hgx())
    assert status == FAIL and "sockets x cores x threads: 232 > 224" in text


def test_the_recorded_small_machine_is_not_an_hgx_node() -> None:
    status, text = figures_result(config("gpu1"), json.loads(RECORDED.read_text())["output"])
    assert status == FAIL and text.startswith("sockets x cores x threads: 224 > ")


def test_unreadable_hardware_fails_and_other_nodes_skip() -> None:
    assert figures_result(config("gpu1"), ["__section=cpu", "garbage"])[0] == FAIL
    assert figures_result(config("ctl1"), hgx())[0] == SKIP

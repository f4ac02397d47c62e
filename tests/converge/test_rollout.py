"""Rollout planning from update policies: live at once, rolling in batches, rebuild refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.orchestrate.rollout import plan_rollout
from gpuforge.spec import Spec, load_spec, parse_spec, resolve_nodes
from tests import yaml_text

H100 = "inventories/slurm-h100.yaml"


def variant(path: str, mutate: Callable[[dict[str, Any]], None]) -> Spec:
    data = yaml.safe_load(Path(path).read_text())
    mutate(data)
    return parse_spec(yaml_text.dump(data))


def test_first_bring_up_has_no_rollout() -> None:
    plan = plan_rollout(None, load_spec(H100))
    assert not plan.needs_rolling and not plan.refused


def test_partition_change_is_live_only() -> None:
    old = load_spec(H100)
    new = variant(H100, lambda d: d["slurm"]["partitions"][0].update(max_time="3-00:00:00"))
    plan = plan_rollout(old, new)
    assert [c.path for c in plan.live] == ["slurm.partitions.gpu.max_time"]
    assert not plan.needs_rolling and not plan.refused


def test_driver_change_rolls_over_gpu_nodes_in_batches() -> None:
    old = load_spec(H100)
    new = variant(H100, lambda d: d["versions"]["driver"].update(version="550.144.03"))
    plan = plan_rollout(old, new)
    assert [c.path for c in plan.rolling] == ["versions.driver.version"]
    assert len(plan.rolling_nodes) == 64 and plan.rolling_nodes[0] == "gpu001"
    assert [len(b) for b in plan.batches] == [4] * 16  # rollout.batch_size: 4
    assert plan.batches[0] == ["gpu001", "gpu002", "gpu003", "gpu004"]


def test_mig_layout_change_rolls_only_over_its_groups() -> None:
    old = load_spec(H100)
    new = variant(H100, lambda d: d["mig"]["configs"]["inference"][0].update(mig_devices={"2g.20gb": 3}))
    plan = plan_rollout(old, new)
    assert plan.rolling_nodes == ["gpu061", "gpu062", "gpu063", "gpu064"]


def test_cluster_name_change_is_refused() -> None:
    old = load_spec(H100)
    new = variant(H100, lambda d: d["cluster"].update(name="hopper2"))
    plan = plan_rollout(old, new)
    assert [c.path for c in plan.refused] == ["cluster.name"]


def test_new_nodes_join_without_a_drain() -> None:
    old = load_spec(H100)

    def grow(d: dict[str, Any]) -> None:
        d["node_groups"][5].update(hosts="gpu[061-066]")

    new = variant(H100, grow)
    plan = plan_rollout(old, new)
    assert not plan.refused
    assert "gpu065" not in plan.rolling_nodes


@pytest.mark.parametrize(("group", "layout"), [("gpu", "inference"), ("mig", None)])
def test_a_groups_mig_config_change_drains_exactly_that_groups_nodes(group: str, layout: str | None) -> None:
    """node_groups[].mig_config is rolling: a group that takes up a layout (or drops its own) has
    every one of its nodes drained, and no other node (the layout is applied only on drained GPUs)."""
    old = load_spec(H100)

    def change(d: dict[str, Any]) -> None:
        next(g for g in d["node_groups"] if g["name"] == group)["mig_config"] = layout

    new = variant(H100, change)
    plan = plan_rollout(old, new)
    assert [c.path for c in plan.rolling] == [f"node_groups.{group}.mig_config"]
    assert not plan.refused and not plan.live
    members = [n.name for n in resolve_nodes(old) if n.group == group]
    assert members and plan.rolling_nodes == members

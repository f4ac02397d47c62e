"""slurm.conf change classification: reconfigure vs restart (Slurm 22.05 rules)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuforge.deploy.slurm_changes import RESTART_KEYS, SlurmAction, classify, parse_slurm_conf, removed_nodes
from gpuforge.render.slurm import slurm_conf
from gpuforge.spec import load_spec, parse_spec
from tests import yaml_text

LAB = "inventories/lab.yaml"


def variant(mutate) -> str:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(Path(LAB).read_text())
    mutate(data)
    return slurm_conf(parse_spec(yaml_text.dump(data)))


BASE = slurm_conf(load_spec(LAB))


def test_unchanged_and_first_configuration() -> None:
    assert classify(BASE, BASE)[0] is SlurmAction.NONE
    assert classify(None, BASE) == (SlurmAction.RESTART, "first configuration")


def test_partition_limit_is_a_reconfigure() -> None:
    new = variant(lambda d: d["slurm"]["partitions"][0].update(max_time="2:00:00"))
    assert classify(BASE, new)[0] is SlurmAction.RECONFIGURE


def test_priority_weight_is_a_reconfigure() -> None:
    new = variant(lambda d: d["slurm"].update(priority={"weight_age": 5}))
    assert classify(BASE, new)[0] is SlurmAction.RECONFIGURE


def test_added_and_removed_nodes_restart() -> None:
    grown = variant(lambda d: d["node_groups"][1].update(hosts="node[2-4]", address_start="10.213.0.12"))
    action, why = classify(BASE, grown)
    assert action is SlurmAction.RESTART and why == "nodes added: node4"
    action, why = classify(grown, BASE)
    assert action is SlurmAction.RESTART and why == "nodes removed: node4"
    assert removed_nodes(grown, BASE) == ["node4"]
    assert removed_nodes(BASE, grown) == []


def test_node_definition_change_restarts() -> None:
    new = variant(
        lambda d: d["node_groups"][1].update(hardware={**d["node_groups"][1]["hardware"], "real_memory_mb": 2000})
    )
    action, why = classify(BASE, new)
    assert action is SlurmAction.RESTART and "node[2-3]" in why


def test_plugin_change_restarts() -> None:
    new = variant(lambda d: d["slurm"].update(process_tracking="cgroup"))
    action, why = classify(BASE, new)
    assert action is SlurmAction.RESTART and "ProctrackType" in why


def test_parse_expands_node_ranges() -> None:
    params, nodes, parts = parse_slurm_conf(BASE)
    assert params["ClusterName"] == "gflab"
    assert sorted(nodes) == ["node1", "node2", "node3"]
    assert "batch" in parts


def _with_line(conf: str, key: str, value: str) -> str:
    """``conf`` with ``key=value`` as a line of its own (replacing the key's line if it has one)."""
    kept = [line for line in conf.splitlines() if not line.startswith(f"{key}=")]
    return "\n".join([*kept, f"{key}={value}"]) + "\n"


def _without_line(conf: str, key: str) -> str:
    return "\n".join(line for line in conf.splitlines() if not line.startswith(f"{key}=")) + "\n"


@pytest.mark.parametrize("key", sorted(RESTART_KEYS))
def test_adding_or_removing_a_restart_only_key_restarts(key: str) -> None:
    """A key the daemons read only at start (TopologyPlugin, GresTypes, ...) needs a restart when it
    appears and when it disappears: a removal is a change too (the daemon keeps the old value)."""
    base = _without_line(BASE, key)
    present = _with_line(base, key, "gpuforge-test-value")
    for old, new in ((base, present), (present, base)):
        action, why = classify(old, new)
        assert action is SlurmAction.RESTART, (key, why)
        assert key in why

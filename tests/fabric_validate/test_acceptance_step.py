"""The acceptance campaign's ``fabric`` step: validate's pair test on the tested nodes, as steps of theirs;
and the rule that lets it on only where a node group has a fabric (exit 2 naming the field otherwise)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpuforge.acceptance.fabric_step import add_fabric_steps, fabric_steps
from gpuforge.acceptance.parsers import ERROR, FAIL, PASS, SKIP
from gpuforge.acceptance.results import Campaign, NodeResult
from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.cluster import Cluster as Loaded
from gpuforge.validator.runner import NO_SECRET_KEX_OPTION, SshTransport
from tests import yaml_text
from tests.conftest import run_cli
from tests.fabric_validate.helpers import ROCE, fabric_lab, spec_of
from tests.fabric_validate.stub_fabric import install


def test_the_step_is_the_pair_test_per_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = fabric_lab(ROCE, hosts="node[2-4]")
    data["acceptance"] = {"steps": {"fabric": {"enabled": True}}}
    spec = spec_of(data)
    nodes = resolve_nodes(spec)
    ips = {n.name: f"10.9.0.{i}" for i, n in enumerate(nodes, 1)}
    state = {"hosts": {n.ssh_target: n.name for n in nodes} | {ip: n for n, ip in ips.items()},
             "ports": {n: {"rxe_eth1": {"port": 1, "gid_index": 1, "ipv4": ip}} for n, ip in ips.items()},
             "bw": {"default": 9.5, "node4->node2": 2.0}, "lat": 20.0}  # fmt: skip
    stub = tmp_path / "stub"
    install(stub, state)
    monkeypatch.setenv("STUB_FABRIC", str(stub))
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    said: list[str] = []
    tr = SshTransport(Cluster.of(spec, path), NO_SECRET_KEX_OPTION)
    steps = fabric_steps(Loaded.of(spec, path), tr, ["node1", "node2", "node3", "node4"], said.append)
    assert steps["node1"].status == SKIP and steps["node1"].message == "the node's group declares no fabric"
    assert steps["node3"].status == PASS, steps["node3"].message
    assert (steps["node2"].status, steps["node4"].status) == (FAIL, FAIL)
    assert "node4->node2: write 2 Gb/s" in steps["node2"].message
    assert any("fabric pair test, round" in s for s in said)
    camp = Campaign("c", "lab", str(path), "h", 0.0)
    camp.nodes = [NodeResult("node2", "batch", []), NodeResult("node3", "batch", [])]
    add_fabric_steps(camp, steps)
    assert [s.step for s in camp.nodes[0].steps] == ["fabric"] and camp.nodes[0].failed_steps()


def test_an_unreachable_node_is_an_error_not_a_failure(tmp_path: Path) -> None:
    data = fabric_lab(ROCE, hosts="node[2-3]")
    spec = spec_of(data)

    class Down:
        strict = True

        def run(self, node: object, command: str, stdin: bytes | None = None, timeout: float = 60) -> object:
            from gpuforge.validator.runner import Completed

            return Completed(255, "", "ssh: connect to host: No route to host", 0.0)

    steps = fabric_steps(Loaded.of(spec, tmp_path / "s.yaml"), Down(), ["node2", "node3"], lambda _m: None)
    assert {s.status for s in steps.values()} == {ERROR}
    assert steps["node2"].message.startswith("not reached: node2 unreachable")


def write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml_text.dump(data, sort_keys=False))
    return path


def test_the_step_needs_a_group_with_a_fabric(tmp_path: Path) -> None:
    without = fabric_lab(None)
    without["acceptance"] = {"steps": {"fabric": {"enabled": True}}}
    cp = run_cli("check", str(write(tmp_path, without)))
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert "acceptance.steps.fabric.enabled" in cp.stderr
    assert "needs a node group with a fabric (node_groups[].fabric)" in cp.stderr
    with_fabric = fabric_lab(ROCE)
    with_fabric["acceptance"] = {"steps": {"fabric": {"enabled": True}}}
    cp = run_cli("check", str(write(tmp_path, with_fabric)))
    assert cp.returncode == 0, cp.stdout + cp.stderr

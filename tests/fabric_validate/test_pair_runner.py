"""``validate --checks fabric.pairs`` end to end: gpuforge's SSH transport runs the pair scripts through a stub
``ssh`` and real ``sh`` against stub perftest tools whose answers change while the clients retry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuforge.spec import resolve_nodes
from gpuforge.spec.cluster import Cluster
from gpuforge.validator import fabric_pairs
from gpuforge.validator.node.base import FAIL, PASS, SKIP
from gpuforge.validator.registry import resolve
from gpuforge.validator.report import Report
from gpuforge.validator.runner import validate
from tests.fabric_validate.helpers import ROCE, fabric_lab, spec_of
from tests.fabric_validate.stub_fabric import install
from tests.validator.vhelpers import REPO

#: The clients' retry window in the tests where one side never serves: short, since the other side's client
#: waits all of it, yet long enough for a live server to start on a loaded machine (``date +%s`` rounds it
#: down by up to a second: at 2 s a healthy pair's client gave up in a fresh-clone run of the suite).
SHORT_WINDOW_S = 8


def run_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, Any], **state: Any
) -> tuple[Report, list[str]]:
    spec = spec_of(data)
    nodes = resolve_nodes(spec)
    fabric_ip = {n.name: f"10.9.0.{i}" for i, n in enumerate(nodes, 1)}
    hosts = {n.ssh_target: n.name for n in nodes} | {ip: name for name, ip in fabric_ip.items()}
    ports = {
        name: {"rxe_eth1": {"port": 1, "gid_index": 1, "ipv4": ip, "netdev": "eth1"}} for name, ip in fabric_ip.items()
    }
    stub = tmp_path / "stub"
    log = install(stub, {"hosts": hosts, "ports": ports, "bw": {"default": 9.5}, "lat": 20.0, **state})
    monkeypatch.setenv("STUB_FABRIC", str(stub))
    monkeypatch.setenv("PATH", f"{stub}:{__import__('os').environ['PATH']}")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    report = validate(Cluster.of(spec, path), checks="fabric.pairs")
    return report, log.read_text().splitlines() if log.exists() else []


def by_node(report: Report) -> dict[str, dict[str, Any]]:
    return {n.name: {r.id: r for r in n.checks} for n in report.nodes}


def test_a_leaf_of_four_in_a_ring_one_slow_node_named_by_its_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, log = run_pairs(
        tmp_path, monkeypatch, fabric_lab(ROCE), bw={"default": 9.5, "node3->node4": 1.0, "node4->node5": 1.0}
    )
    got = by_node(report)
    assert got["node1"]["fabric.pairs"].status == SKIP  # the controller's group has no fabric
    assert got["node1"]["fabric.pairs"].message == "the node's group declares no fabric"
    assert got["node2"]["fabric.pairs"].status == PASS
    assert got["node2"]["fabric.pairs"].message == (
        "node2->node3: write 9.5 Gb/s, read lat 20 us; node5->node2: write 9.5 Gb/s, read lat 20 us"
    )
    node4 = got["node4"]["fabric.pairs"]
    assert node4.status == FAIL and node4.message == (
        "node4->node5: write 1 Gb/s, read lat 20 us (ib_write_bw 1 Gb/s, below the spec's 5); "
        "node3->node4: write 1 Gb/s, read lat 20 us (ib_write_bw 1 Gb/s, below the spec's 5)"
    )
    assert {got[n]["fabric.pairs"].status for n in ("node3", "node5")} == {FAIL}
    # The clients asked before their servers listened, were refused, and retried until they were served.
    refused = [x for x in log if "client" in x and x.endswith("refused")]
    served = [x for x in log if "ib_write_bw client" in x and not x.endswith("refused")]
    assert refused and len(served) == 4
    assert {x.split()[1] for x in served} == {"node2", "node3", "node4", "node5"}
    # JSON, JUnit and Prometheus carry the pair results like any other check.
    doc = json.loads(report.to_json())
    assert any(c["id"] == "fabric.pairs" and c["status"] == "fail" for n in doc["nodes"] for c in n["checks"])
    assert 'check="fabric.pairs"' in report.to_prometheus() and "fabric.pairs" in report.to_junit()
    assert report.exit_code == 1


def test_pairs_stay_within_their_leaf_and_a_dead_server_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fabric_pairs, "CONNECT_WINDOW_S", SHORT_WINDOW_S)
    leaves = {"leaf1": "node[2-3]", "leaf2": "node[4-5]"}
    report, log = run_pairs(tmp_path, monkeypatch, fabric_lab(ROCE, leaves=leaves), dead=["node4"])
    got = by_node(report)
    assert (got["node2"]["fabric.pairs"].status, got["node3"]["fabric.pairs"].status) == (PASS, PASS)
    clients = {x.split()[1]: x.split()[4] for x in log if "ib_write_bw client" in x}
    assert clients == {"node3": "10.9.0.2", "node5": "10.9.0.4"}  # node2 serves node3; node4 serves node5
    node5 = got["node5"]["fabric.pairs"]
    assert node5.status == FAIL
    assert node5.message.startswith("node4->node5: nothing measured (ib_write_bw the server was not reached: "
                                    "Couldn't connect to 10.9.0.4:18515")  # fmt: skip
    assert "server exit 1: Unable to find the Infiniband/RoCE device" in node5.message


def test_a_side_whose_session_hangs_up_is_named_with_what_ssh_and_the_script_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fabric_pairs, "CONNECT_WINDOW_S", SHORT_WINDOW_S)
    leaves = {"leaf1": "node[2-3]", "leaf2": "node[4-5]"}
    report, _log = run_pairs(tmp_path, monkeypatch, fabric_lab(ROCE, leaves=leaves), hang_up=["node4"])
    node5 = by_node(report)["node5"]["fabric.pairs"]
    assert node5.status == FAIL
    assert "node4 not reached over SSH (exit 255): ssh said nothing (at LogLevel=ERROR: the node hung up after " \
           "the key exchange); the script printed nothing" in node5.message, node5.message  # fmt: skip
    assert by_node(report)["node2"]["fabric.pairs"].status == PASS


def test_the_spec_sets_how_long_ib_write_bw_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``thresholds.write_bw_seconds`` reaches perftest's -D on both sides (default 5)."""
    slow = {**ROCE, "thresholds": {**ROCE["thresholds"], "write_bw_seconds": 9}}
    _, log = run_pairs(tmp_path, monkeypatch, fabric_lab(slow, hosts="node[2-3]"))
    served = [x for x in log if "ib_write_bw client" in x and not x.endswith("refused")]
    assert served and all(x.endswith(" -D 9") for x in served), served
    _, log = run_pairs(tmp_path / "default", monkeypatch, fabric_lab(ROCE, hosts="node[2-3]"))
    assert [x for x in log if "ib_write_bw client" in x and x.endswith(" -D 5")], log
    # a count of writes instead (-n), on both sides (perftest: SYMMETRIC); no -D then
    counted = {**ROCE, "thresholds": {**ROCE["thresholds"], "write_bw_iterations": 500}}
    report, log = run_pairs(tmp_path / "counted", monkeypatch, fabric_lab(counted, hosts="node[2-3]"))
    writes = [x for x in log if "ib_write_bw" in x]
    assert writes and all(x.endswith(" -n 500") or x.endswith("refused") for x in writes), writes
    assert any("ib_write_bw server" in x for x in writes) and any("ib_write_bw client" in x for x in writes), log
    assert by_node(report)["node3"]["fabric.pairs"].status == PASS


def test_a_node_alone_under_its_leaf_has_no_partner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = fabric_lab(ROCE, hosts="node[2-3]", leaves={"leaf1": "node2", "leaf2": "node3"})
    report, log = run_pairs(tmp_path, monkeypatch, data)
    got = by_node(report)
    assert got["node2"]["fabric.pairs"].status == SKIP
    assert got["node2"]["fabric.pairs"].message == "no other node of leaf leaf1 passed fabric.ports to pair with"
    assert not [x for x in log if "ib_" in x]


def test_the_pair_test_runs_only_where_named() -> None:
    assert "fabric.pairs" not in {c.id for c in resolve(None)}
    assert "fabric.pairs" not in {c.id for c in resolve("job")}
    named = {c.id for c in resolve("fabric.pairs")}
    assert {"fabric.pairs", "fabric.ports", "fabric.devices", "connection.ssh"} <= named
    assert "fabric.pairs" in {c.id for c in resolve("fabric")}


def test_nccl_across_a_gpu_pair_from_the_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = json.loads((REPO / "tests/acceptance/fixtures/nccl_2node_16gpu.json").read_text())["stdout"]
    fabric = {**ROCE, "nccl": "2.27.7-1", "nccl_cuda": "12.9", "nccl_tests": True,
              "thresholds": {"nccl_busbw_gbps": 300}}  # fmt: skip
    data = fabric_lab(fabric, hosts="node[2-3]", gpu=True)
    data["versions"]["cuda_toolkit"] = "12.4"
    report, log = run_pairs(tmp_path, monkeypatch, data, nccl_output=recorded)
    got = by_node(report)
    assert got["node2"]["fabric.pairs"].status == PASS, got["node2"]["fabric.pairs"].message
    assert got["node2"]["fabric.pairs"].message.endswith("NCCL busbw 338.82 GB/s")
    srun = [x for x in log if " srun " in x]
    assert len(srun) == 1 and srun[0].split()[1] == "node1"  # from the controller
    assert "-N2 -w node2,node3 -p batch --ntasks-per-node=8 --gres=gpu:8 --mpi=pmix" in srun[0]

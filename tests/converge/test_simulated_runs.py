"""plan and apply through pyinfra on simulated nodes (tests/converge/simulated.py): the whole
control-host path (preflight, secrets, node locks, inventory, facts, operations, results) runs
in-process; the nodes record what they are sent and answer as fresh machines.

Plans of fresh nodes are checked against golden files with every step's exact command
(``GPUFORGE_UPDATE_GOLDEN=1`` rewrites them after a deliberate change; review the diff).
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate import node_lock
from gpuforge.orchestrate.applied_record import last_applied
from gpuforge.orchestrate.apply import ApplyRefused, apply, run_deploys
from gpuforge.orchestrate.plan import plan
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.cluster import Cluster, load_cluster
from tests import yaml_text
from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, assert_golden_plan, simulated, write_simulated_spec
from tests.converge.stub_slurm import StubSlurm

GOLDEN = Path(__file__).parent / "fixtures" / "plan_fresh"
NODES = "ctl01,db01,mon01,login01,gpu001"
#: The operator's sha256 pins of the example cluster's mirrored release files (no upstream publishes one).
ARTIFACT_PINS = {
    name: hashlib.sha256(f"simulated release file {name}".encode()).hexdigest()
    for name in (
        "enroot_4.1.2-1_amd64.deb",
        "enroot+caps_4.1.2-1_amd64.deb",
        "pyxis-0.24.0.tar.gz",
        "nvidia-mig-manager_0.15.0-1_amd64.deb",
    )
}


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """inventories/slurm-h100.yaml with its SSH files under tmp_path; state under tmp_path; the
    sha256 of the release files on its artifacts mirror pinned (made up: nothing is downloaded)."""
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"]["artifact_sha256"] = ARTIFACT_PINS
    path = write_simulated_spec(data, tmp_path, "hopper.yaml")
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return path


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    return simulated(monkeypatch, tmp_path)


def planned_commands(ops: list[dict[str, Any]]) -> list[str]:
    return [s["command"] for op in ops for s in op["steps"] if s.get("command")]


@pytest.mark.parametrize("node", NODES.split(","))
def test_plan_of_a_fresh_node_is_exactly_the_golden_one(spec_file: Path, cluster: SimulatedCluster, node: str) -> None:
    result = plan(load_cluster(spec_file), limit=node)
    # Rendered files' diffs are checked by the render tests; the golden holds the steps.
    got = assert_golden_plan(result, node, GOLDEN)
    full = result.as_dict()["hosts"][node]
    # A plan reads facts and changes nothing: no planned command, no upload reaches the node.
    sent = set(cluster.commands[node])
    assert sent, "the plan read no facts"
    assert not sent & set(planned_commands(got["operations"]))
    assert cluster.uploads.get(node, []) == []
    # Secrets are never in a plan: not the munge key's bytes, not in a diff.
    text = json.dumps(full)
    secrets = SecretStore("hopper")
    key = secrets.munge_key()
    assert key.hex() not in text and base64.b64encode(key).decode() not in text
    assert secrets.db_password() not in text
    for op in full["operations"]:
        assert not op["diffs"].get("/etc/munge/munge.key")
        for s in op["steps"]:
            if s.get("path") in ("/etc/munge/munge.key", "/etc/slurm/slurmdbd.conf"):
                assert "secret content (not shown)" in s["summary"], s


def test_apply_sends_every_planned_step_in_order_and_uploads_every_file(
    spec_file: Path, cluster: SimulatedCluster
) -> None:
    planned = plan(load_cluster(spec_file), limit="gpu001").as_dict()["hosts"]["gpu001"]["operations"]
    cluster.commands.clear()
    result = run_deploys(load_cluster(spec_file), "gpu001")
    assert result.ok and list(result.hosts) == ["gpu001"], result.hosts
    host = result.hosts["gpu001"]
    assert host.changed and host.error is None
    sent = cluster.commands["gpu001"]
    want = planned_commands(planned)
    at = 0  # every planned command, in the planned order, inside what was sent
    for step in want:
        found = next((i for i in range(at, len(sent)) if step in sent[i]), None)
        assert found is not None, f"not sent (or out of order): {step[:200]}"
        at = found
    uploads = [s["path"] for op in planned for s in op["steps"] if s["kind"] == "upload"]
    assert len(cluster.uploads["gpu001"]) == len(uploads)
    # Files are staged and renamed into place: the final path appears only in the install command.
    for path in uploads:
        assert any("mv -fT" in c and f" {path}" in c for c in sent), path


def test_a_failing_step_fails_that_node_only_with_the_line_that_says_why(
    spec_file: Path, cluster: SimulatedCluster
) -> None:
    cluster.respond(
        r"apt-get .* install .*chrony",
        ["E: Unable to locate package chrony (simulated mirror)"],
        ok=False,
        host="login01",
    )
    result = run_deploys(load_cluster(spec_file), "login01,mon01")
    assert result.hosts["mon01"].ok and result.hosts["mon01"].changed
    login = result.hosts["login01"]
    assert not login.ok and login.connected
    assert "E: Unable to locate package chrony (simulated mirror)" in (login.error or "")
    # Nothing after the failed operation ran on that node.
    assert not any("systemctl" in c and "slurmd" in c for c in cluster.commands["login01"])


def test_a_node_that_goes_away_mid_command_fails_alone_and_the_others_finish(
    spec_file: Path, cluster: SimulatedCluster
) -> None:
    """An exception out of one node's connection (paramiko's EOFError when it powers off) fails that
    node, named; the other nodes run every remaining operation (pyinfra alone would stop them all)."""
    alone = run_deploys(load_cluster(spec_file), "mon01")
    assert alone.ok
    everything = list(cluster.commands["mon01"])
    cluster.commands.clear()
    cluster.dies_at["login01"] = r"apt-get .* install .*chrony"
    result = run_deploys(load_cluster(spec_file), "login01,mon01")
    login = result.hosts["login01"]
    assert not login.ok and "the connection to the node was lost mid-run (EOFError)" in (login.error or ""), login
    assert result.hosts["mon01"].ok and result.hosts["mon01"].error is None, result.hosts["mon01"]
    assert cluster.commands["mon01"][-1] == everything[-1]  # mon01 ran to its last command
    assert not any("systemctl" in c and "slurmd" in c for c in cluster.commands["login01"])


def test_an_unreachable_node_is_reported_and_the_others_converge(spec_file: Path, cluster: SimulatedCluster) -> None:
    cluster.unreachable.add("db01")
    result = run_deploys(load_cluster(spec_file), "db01,mon01")
    assert result.hosts["mon01"].ok
    db = result.hosts["db01"]
    assert not db.connected and db.error is not None and db.error.startswith("unreachable over SSH")
    assert "db01" not in cluster.commands  # nothing was sent to it


def test_a_plan_where_no_node_answers_reports_each_one(spec_file: Path, cluster: SimulatedCluster) -> None:
    """pyinfra raises "No hosts remaining!" when it reaches no host: a plan reports the nodes instead."""
    cluster.unreachable.update({"db01", "mon01"})
    result = plan(load_cluster(spec_file), limit="db01,mon01")
    assert not result.ok
    hosts = result.as_dict()["hosts"]
    assert sorted(hosts) == ["db01", "mon01"]
    for name in ("db01", "mon01"):
        assert hosts[name]["error"].startswith("unreachable over SSH"), hosts[name]
    assert cluster.commands == {}  # nothing was sent anywhere


def test_a_node_locked_by_another_apply_is_left_out_naming_the_holder(
    spec_file: Path, cluster: SimulatedCluster
) -> None:
    from gpuforge.spec import load_spec

    other = node_lock.take(Cluster.of(load_spec(spec_file), Path("/elsewhere/colleague.yaml")), ["mon01"])
    try:
        assert list(other.held) == ["mon01"]
        result = run_deploys(load_cluster(spec_file), "mon01,login01")
    finally:
        other.release()
    assert result.hosts["login01"].ok
    mon = result.hosts["mon01"]
    assert mon.connected and mon.error is not None
    assert mon.error.startswith("another gpuforge apply holds this node: ") and "(colleague.yaml)" in mon.error
    assert "mon01" not in cluster.commands
    # Released: the next run takes it.
    assert run_deploys(load_cluster(spec_file), "mon01").hosts["mon01"].ok


def test_apply_records_the_spec_and_refuses_a_rebuild_field_next_time(
    spec_file: Path, cluster: SimulatedCluster
) -> None:
    events: list[str] = []
    result = apply(load_cluster(spec_file), on_event=events.append)  # all 69 nodes at once (a first apply is live)
    assert result.ok, {n: h.error for n, h in result.hosts.items() if h.error}
    assert len(result.hosts) == 69 and all(h.changed for h in result.hosts.values())
    assert last_applied(load_cluster(spec_file)) is not None
    assert "connected to 69 node(s)" in " ".join(events)
    data = yaml.safe_load(spec_file.read_text())
    data["cluster"]["name"] = "renamed"
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    cluster.commands.clear()
    with pytest.raises(ApplyRefused, match=r"cluster\.name"):
        apply(load_cluster(spec_file))
    assert cluster.commands == {}  # refused before any node was touched


@pytest.fixture
def rolling(spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> StubSlurm:
    """A first apply recorded (batches of 40), then a driver change: every GPU node rolls. The
    controller is a stand-in Slurm run by a real shell (tests/converge/stub_slurm.py)."""
    from gpuforge.orchestrate import remote, slurm_drain

    data = yaml.safe_load(spec_file.read_text())
    data["rollout"] = {"batch_size": 40, "drain_timeout": 60}
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    assert apply(load_cluster(spec_file)).ok
    data["versions"]["driver"]["version"] = "570.172.08"
    spec_file.write_text(yaml_text.dump(data, sort_keys=False))
    slurm = StubSlurm(tmp_path / "slurm", "ctl01", [n.name for n in resolve_nodes(load_spec(spec_file))])
    monkeypatch.setattr(remote, "run", slurm.remote_run)
    monkeypatch.setattr(slurm_drain, "POLL_S", 0.2)
    return slurm


def test_a_rolling_change_drains_applies_validates_and_resumes_batch_by_batch(
    spec_file: Path, cluster: SimulatedCluster, rolling: StubSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuforge.orchestrate import apply as apply_module

    validated: list[list[str]] = []
    monkeypatch.setattr(apply_module, "validate_nodes", lambda _p, nodes: validated.append(nodes) or {})
    events: list[str] = []
    result = apply(load_cluster(spec_file), on_event=events.append)
    assert result.ok, {n: h.error for n, h in result.hosts.items() if h.error}
    assert [len(b) for b in validated] == [40, 24]
    drains = [line for line in rolling.log() if "State=DRAIN" in line]
    assert drains == [
        "scontrol update NodeName=gpu[001-040] State=DRAIN Reason=gpuforge: rolling change",
        "scontrol update NodeName=gpu[041-064] State=DRAIN Reason=gpuforge: rolling change",
    ]
    assert len([line for line in rolling.log() if "State=RESUME" in line]) == 64
    assert not any(rolling.node(f"gpu{i:03d}")["drain"] for i in range(1, 65))
    assert any(e.startswith("rolling change (versions.driver.version)") for e in events)
    assert all(n in cluster.commands for n in validated[0])


def test_a_failed_validation_stops_the_rollout_and_leaves_the_batch_drained(
    spec_file: Path, cluster: SimulatedCluster, rolling: StubSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuforge.orchestrate import apply as apply_module

    monkeypatch.setattr(
        apply_module, "validate_nodes", lambda _p, nodes: {nodes[0]: "validation failed: gpu.count: 7 of 8 GPUs"}
    )
    result = apply(load_cluster(spec_file))
    assert not result.ok
    assert result.hosts["gpu001"].error == (
        "validation failed: gpu.count: 7 of 8 GPUs (node left drained; rollout stopped)"
    )
    assert not any("State=RESUME" in line for line in rolling.log())  # nothing resumed
    assert rolling.node("gpu040")["drain"] and not rolling.node("gpu041")["drain"]
    assert "gpu041" not in result.hosts  # the second batch never started

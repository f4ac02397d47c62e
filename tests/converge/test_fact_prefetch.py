"""The run's merged fact read (gpuforge.deploy.fact_prefetch): each layer's part of one merged
read equals what its own read returns, run for real by ``sh`` on this machine; the read stands
only while the run has changed nothing; plans and applies on simulated nodes read once per node
until something changes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from pyinfra.api.operation import OperationMeta

from gpuforge.deploy.converge import LayerFacts
from gpuforge.deploy.fact_prefetch import FactPrefetch, FactRequest, merge, project
from gpuforge.deploy.facts.layer import SECTIONS, CommandRead, layer_state_command, parse_layer_state
from gpuforge.deploy.run import EndMergedReadsOnChange
from gpuforge.orchestrate.apply import run_deploys
from gpuforge.orchestrate.plan import plan
from gpuforge.spec.cluster import load_cluster
from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec


def read(request: FactRequest) -> LayerFacts:
    """``request``'s LayerState command run by ``sh`` here, parsed as the fact parses it."""
    command = layer_state_command(**request.kwargs())
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    return parse_layer_state(out.stdout.splitlines())


def test_each_layers_part_of_a_merged_read_equals_its_own_read(tmp_path: Path) -> None:
    conf = tmp_path / "a.conf"
    conf.write_text("x = 1\n")
    conf.chmod(0o640)
    other = tmp_path / "b.conf"
    other.write_text("y = 2\n")
    gone = str(tmp_path / "missing.conf")
    first = FactRequest(
        packages=("dpkg", "no-such-package-gpuforge"),
        paths=(str(conf), gone, str(tmp_path)),
        units=("ssh",),
        accounts=("root", "no-such-user-gpuforge"),
        read_paths=(str(conf), CommandRead("kernel", "uname -s")),
    )
    second = FactRequest(
        packages=("bash", "dpkg"),
        paths=(str(other), str(conf)),
        accounts=("nobody",),
        read_paths=(gone, str(other)),
    )
    third = FactRequest(packages=("coreutils",))  # the packages repair's read: no units, no files
    pinned = FactRequest(packages=("bash=0.0-gpuforge",))  # a layer holding a package at a version
    merged, covered = merge([first, second, third, pinned])
    assert covered == [first, second, third, pinned]
    assert merged.packages == ("dpkg", "no-such-package-gpuforge", "bash", "coreutils", "bash=0.0-gpuforge")
    whole = read(merged)
    for request in (first, second, third, pinned):
        own = read(request)
        assert project(whole, request) == own
    assert project(whole, pinned).packages["bash"], "a pinned package is read by its name"
    # The reads saw something real, not three empty answers.
    assert read(first).files[str(conf)] is not None and read(first).files[gone] is None
    assert read(second).packages["bash"] and read(first).contents["kernel"] == "Linux\n"
    assert read(first).accounts == {"root": 0, "no-such-user-gpuforge": None}


def test_requests_that_cannot_share_a_read_are_left_to_read_on_their_own() -> None:
    deb = FactRequest(packages=("munge",), read_paths=(CommandRead("state", "echo a"),))
    rpm = FactRequest(packages=("munge",), rpm=True)
    clash = FactRequest(read_paths=(CommandRead("state", "echo b"),))
    same = FactRequest(read_paths=(CommandRead("state", "echo a"),))
    merged, covered = merge([deb, rpm, clash, same])
    assert [r.identity() for r in covered] == [deb.identity(), same.identity()]
    assert merged.rpm is False and [r.command for r in merged.read_paths] == ["echo a"]  # type: ignore[attr-defined]
    prefetch = FactPrefetch()
    for r in (deb, rpm, clash, same):
        prefetch.register("n1", r)
    assert prefetch.pending("n1") == merged
    prefetch.store("n1", LayerFacts(packages={"munge": "0.5"}, contents={"state": "a"}))
    assert prefetch.pending("n1") is None  # read once
    assert prefetch.lookup("n1", rpm) is None and prefetch.lookup("n1", clash) is None
    assert prefetch.lookup("n1", deb) == LayerFacts(packages={"munge": "0.5"}, contents={"state": "a"})


def test_nothing_is_served_from_a_merged_read_once_the_run_changed_something() -> None:
    request = FactRequest(packages=("munge",))
    prefetch = FactPrefetch()
    prefetch.register("n1", request)
    prefetch.register("n2", request)
    prefetch.pending("n1")  # n1's first read: the merged request, then its answer
    prefetch.store("n1", LayerFacts(packages={"munge": "1"}))
    tracker = EndMergedReadsOnChange(prefetch)

    def state_with(meta: OperationMeta) -> Any:
        host = "n2"  # pyinfra's hosts are keys of state.ops; any hashable stands in
        return SimpleNamespace(inventory=[host], ops={host: {"op": SimpleNamespace(operation_meta=meta)}})

    quiet = OperationMeta("op", False)
    quiet.set_complete(True, [], None)  # type: ignore[arg-type]
    tracker.operation_end(state_with(quiet), "op")
    assert prefetch.lookup("n1", request) is not None  # an operation that ran nothing on any node
    busy = OperationMeta("op", True)
    busy.set_complete(True, ["systemctl restart munge"], None)  # type: ignore[arg-type]
    tracker.operation_end(state_with(busy), "op")  # n2 changed: n1's read goes too
    assert prefetch.stale and prefetch.lookup("n1", request) is None and prefetch.pending("n2") is None
    for meta_args in ((False, []), None):
        p = FactPrefetch()
        p.store("n1", LayerFacts())
        meta = OperationMeta("op", False)
        if meta_args is not None:  # failed; None: never finished (the node went away mid-run)
            meta.set_complete(*meta_args, None)  # type: ignore[arg-type]
        EndMergedReadsOnChange(p).operation_end(state_with(meta), "op")
        assert p.stale


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return write_simulated_spec(data, tmp_path, "hopper.yaml")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    return simulated(monkeypatch, tmp_path)


def layer_reads(cluster: SimulatedCluster, node: str) -> list[str]:
    """The LayerState reads sent to ``node`` (its sections; other facts use other markers)."""
    marks = [f"echo '__section={name}'" for name in SECTIONS]
    return [c for c in cluster.commands.get(node, []) if any(m in c for m in marks)]


def test_a_plan_reads_each_node_once_for_all_its_layers(spec_file: Path, cluster: SimulatedCluster) -> None:
    result = plan(load_cluster(spec_file), limit="ctl01,gpu001")
    assert result.ok, result.errors
    for node, own in (("ctl01", ("slurmctld", "/etc/slurm/slurm.conf")), ("gpu001", ("slurmd", "/etc/default/slurmd"))):
        reads = layer_reads(cluster, node)
        assert len(reads) == 1, reads
        # One read covers the first layer (base: chrony), munge, Slurm and the last (health).
        words = ("chrony", "/etc/munge/munge.key", *own, "/usr/local/sbin/gpuforge-health")
        missing = [w for w in words if w not in reads[0]]
        assert not missing, reads[0]


def test_an_apply_reads_each_layer_on_its_own_once_something_changed(
    spec_file: Path, cluster: SimulatedCluster
) -> None:
    result = run_deploys(load_cluster(spec_file), "gpu001")
    assert result.ok and result.hosts["gpu001"].changed, result.hosts
    reads = layer_reads(cluster, "gpu001")
    # The first read is the merged one; the fresh node's base layer changed it, so each later
    # layer read its own state after the change (munge's read comes after base's commands).
    assert "/etc/default/slurmd" in reads[0] and "/etc/munge/munge.key" in reads[0]
    assert len(reads) > 3
    sent = cluster.commands["gpu001"]
    munge_read = next(i for i, c in enumerate(sent) if c in reads[1:] and "/etc/munge/munge.key" in c)
    assert "/etc/default/slurmd" not in sent[munge_read]
    assert any("chrony" in c and "apt-get" in c for c in sent[:munge_read])

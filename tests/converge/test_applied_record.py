"""The applied-state record fails closed: an unreadable record never means "first bring-up"."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.orchestrate import apply as apply_mod
from gpuforge.orchestrate import remote
from gpuforge.orchestrate.applied_record import RecordUnreadable, last_applied, record_applied
from gpuforge.orchestrate.rollout import roll_every_node
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.cluster import Cluster, load_cluster

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "inventories" / "slurm-h100.yaml"
CORRUPT = {
    "truncated JSON": b'{"cluster": {"name": "h100-prod"',
    "JSON that is no spec": b'{"hello": "world"}',
    "not UTF-8": b"\xff\xfe\x00garbage",
    "empty": b"",
}


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path))
    return tmp_path


def test_no_record_is_first_bring_up_and_a_written_record_reads_back(state_dir: Path) -> None:
    assert last_applied(load_cluster(H100)) is None
    spec = load_spec(H100)
    record_applied(Cluster.of(spec, H100))
    path = load_cluster(H100).applied_record
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert last_applied(load_cluster(H100)) == spec
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_unreadable_record_raises(state_dir: Path, content: bytes) -> None:
    path = load_cluster(H100).applied_record
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(RecordUnreadable) as info:
        last_applied(load_cluster(H100))
    assert info.value.path == path and str(path) in str(info.value)


def test_apply_refuses_before_touching_any_host(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = load_cluster(H100).applied_record
    path.parent.mkdir(parents=True)
    path.write_bytes(CORRUPT["truncated JSON"])

    def touched(*a: object, **k: object) -> None:
        raise AssertionError("a host was touched")

    monkeypatch.setattr(apply_mod, "run_deploys", touched)
    monkeypatch.setattr(apply_mod, "run_batches", touched)
    monkeypatch.setattr(remote, "run", touched)
    with pytest.raises(RecordUnreadable):
        apply_mod.apply(load_cluster(H100))


def test_forced_apply_with_an_unreadable_record_rolls_every_node(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = load_cluster(H100).applied_record
    path.parent.mkdir(parents=True)
    path.write_bytes(CORRUPT["JSON that is no spec"])
    seen: list[list[list[str]]] = []

    def batches(ro: object, batches: list[list[str]], operator: object, result: object) -> bool:
        seen.append(batches)
        return True

    monkeypatch.setattr(apply_mod, "run_batches", batches)
    monkeypatch.setattr(apply_mod, "run_deploys", lambda *a, **k: pytest.fail("applied everywhere at once"))
    in_service = subprocess.CompletedProcess([], 0, "", "")  # sinfo: every node in service
    monkeypatch.setattr(remote, "run", lambda *a, **k: in_service)
    apply_mod.apply(load_cluster(H100), force=True)
    spec = load_spec(H100)
    assert seen == [roll_every_node(spec).batches]
    plan = roll_every_node(spec)
    names = [n.name for n in resolve_nodes(spec)]
    assert plan.unknown_change and plan.rolling_nodes == names
    assert all(len(b) <= spec.rollout.batch_size for b in plan.batches)
    assert [n for b in plan.batches for n in b] == names


def test_cli_apply_exits_2_naming_the_record(state_dir: Path) -> None:
    path = load_cluster(H100).applied_record
    path.parent.mkdir(parents=True)
    path.write_text("{")
    cp = subprocess.run(
        [sys.executable, "-m", "gpuforge", "apply", "--yes", str(H100)],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUFORGE_STATE_DIR": str(state_dir)},
        cwd=REPO,
        timeout=120,
    )
    assert cp.returncode == 2, cp.stdout + cp.stderr
    assert f"{path}, cannot be read" in " ".join(cp.stderr.split()) and "Traceback" not in cp.stderr
    assert "--force" in cp.stderr

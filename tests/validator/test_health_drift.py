"""The health check's drift check (``config.files_intact``): the node's managed files against the
list its health.json carries, read by a real shell; a hand edit drains the node with a tagged
reason through a stub ``scontrol``; a running apply (its lock held) is never mistaken for drift."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.orchestrate.node_lock import LOCK_FILE
from gpuforge.probes import files as probe_files
from gpuforge.render import node_health_config, render_managed, render_node
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_PROGRAM, health_config_text
from gpuforge.spec import load_spec
from gpuforge.spec.nodes import resolve_nodes
from gpuforge.validator import nodelocal as nl
from gpuforge.validator.node.execute import run_node_checks, select
from tests.validator.test_validator_drain import FAKE_SCONTROL

REPO = Path(__file__).resolve().parents[2]
SPEC = load_spec(REPO / "inventories" / "slurm-h100.yaml")


def _node(name_prefix: str):  # type: ignore[no-untyped-def]
    return next(n for n in resolve_nodes(SPEC) if n.name.startswith(name_prefix))


def test_health_config_lists_every_other_managed_file_and_no_secret_digest() -> None:
    node = _node("gpu")
    listed = {e["path"]: e for e in node_health_config(SPEC, node)["config_files"]}
    managed = render_managed(SPEC, node)
    assert set(listed) == {f.path for f in managed}
    assert HEALTH_CONFIG not in listed and HEALTH_PROGRAM not in listed
    for f in managed:
        want = None if f.secret else hashlib.sha256(f.data).hexdigest()
        assert listed[f.path]["sha256"] == want, f.path
        assert (listed[f.path]["mode"], listed[f.path]["owner"]) == (f.mode.zfill(4), f.owner)
    assert listed["/etc/munge/munge.key"]["sha256"] is None  # a secret: owner and mode only


def test_render_node_and_the_health_layer_write_the_same_health_json() -> None:
    node = _node("gpu")
    rendered = {f.path: f for f in render_node(SPEC, node)}
    assert rendered[HEALTH_CONFIG].data.decode() == health_config_text(SPEC, node, render_managed(SPEC, node))


def test_validate_mode_leaves_the_stand_in_to_the_cluster_check() -> None:
    assert "config.files_intact" in {c.id for c in select(health_only=True)}
    assert "config.files_intact" not in {c.id for c in select(health_only=False)}


def _listed(paths: list[Path]) -> list[dict[str, object]]:
    out = []
    for p in paths:
        st = p.stat()
        owner = subprocess.run(["stat", "-c", "%U|%G", str(p)], capture_output=True, text=True, check=True)
        user, group = owner.stdout.strip().split("|")
        out.append({"path": str(p), "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                    "mode": f"{st.st_mode & 0o7777:04o}", "owner": user, "group": group})  # fmt: skip
    return out


@pytest.fixture()
def managed(tmp_path: Path) -> tuple[dict[str, object], list[Path]]:
    paths = []
    for name, text in (("slurm.conf", "ClusterName=h100\n"), ("cgroup.conf", "ConstrainDevices=yes\n")):
        p = tmp_path / name
        p.write_text(text)
        p.chmod(0o644)
        paths.append(p)
    return {"node": "node2", "config_files": _listed(paths)}, paths


def test_files_as_written_pass_and_a_hand_edit_or_mode_change_fails(
    managed: tuple[dict[str, object], list[Path]],
) -> None:
    cfg, (slurm_conf, cgroup_conf) = managed
    results, _ = run_node_checks(cfg, ["config.files_intact"], health_only=True)
    assert [(r.id, r.status) for r in results] == [("config.files_intact", "pass")], results
    cgroup_conf.write_text("ConstrainDevices=no\n")
    slurm_conf.chmod(0o666)
    (result,) = run_node_checks(cfg, ["config.files_intact"], health_only=True)[0]
    assert result.status == "fail"
    assert f"{cgroup_conf} content differs" in result.message
    assert f"{slurm_conf} mode 0666 not 0644" in result.message
    slurm_conf.unlink()
    (result,) = run_node_checks(cfg, ["config.files_intact"], health_only=True)[0]
    assert f"{slurm_conf} missing" in result.message


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root (CI and the lab run as root)")
def test_a_changed_owner_alone_is_drift(managed: tuple[dict[str, object], list[Path]]) -> None:
    """Content and mode as written, only the owner changed: still drift (only a lab test caught a
    mutation that dropped the owner from the rule)."""
    cfg, (slurm_conf, _) = managed
    listed = {str(f["path"]): f for f in cfg["config_files"]}  # type: ignore[attr-defined]
    before = f"{listed[str(slurm_conf)]['owner']}:{listed[str(slurm_conf)]['group']}"
    os.chown(slurm_conf, 65534, 65534)  # nobody:nogroup
    (result,) = run_node_checks(cfg, ["config.files_intact"], health_only=True)[0]
    assert result.status == "fail"
    assert f"{slurm_conf} owner nobody:nogroup not {before}" in result.message
    assert "content differs" not in result.message and " mode " not in result.message


def test_a_held_apply_lock_is_reported_not_drift(tmp_path: Path, managed: tuple[dict[str, object], list[Path]]) -> None:
    assert probe_files.APPLY_LOCK_FILE == LOCK_FILE  # the health check tests the lock the apply holds
    lock = tmp_path / "apply.lock"
    lock.touch()
    _, paths = managed
    command = probe_files.managed_files_command([str(p) for p in paths]).replace(probe_files.APPLY_LOCK_FILE, str(lock))
    free = probe_files.parse_managed_files(
        subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout.splitlines()
    )
    assert free["apply_running"] is False and set(free["files"]) == {str(p) for p in paths}
    holder = subprocess.Popen(["flock", str(lock), "sleep", "30"])
    try:
        for _ in range(50):  # until the holder has it
            if subprocess.run(["flock", "-n", str(lock), "true"]).returncode != 0:
                break
            subprocess.run(["sleep", "0.1"])
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout
        assert probe_files.parse_managed_files(out.splitlines())["apply_running"] is True
    finally:
        holder.kill()
        holder.wait()


def test_a_hand_edit_drains_the_node_with_the_tagged_reason(
    tmp_path: Path, managed: tuple[dict[str, object], list[Path]]
) -> None:
    cfg, (_, cgroup_conf) = managed
    cgroup_conf.write_text("ConstrainDevices=no\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(FAKE_SCONTROL)
    (bindir / "scontrol").chmod(0o755)
    state, log = tmp_path / "state.json", tmp_path / "calls.log"
    state.write_text(json.dumps({"state": "ALLOCATED"}))
    log.write_text("")
    cfg_path = tmp_path / "health.json"
    cfg_path.write_text(json.dumps(cfg))
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_SLURM_STATE": str(state),
           "FAKE_SLURM_LOG": str(log)}  # fmt: skip
    cmd = [sys.executable, "-I", nl.__file__, "--config", str(cfg_path), "--checks", "config.files_intact", "--slurm"]
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    after = json.loads(state.read_text())
    assert after["state"] == "IDLE+DRAIN"
    assert after["reason"].startswith(f"gpuforge: health: config.files_intact: changed by hand: {cgroup_conf} content")
    # Repaired (as apply would): the next run resumes the node it drained itself.
    cgroup_conf.write_text("ConstrainDevices=yes\n")
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert json.loads(state.read_text()) == {"state": "IDLE"}

"""Two runs at once: the second apply of a spec is refused; secrets are created once, by one process."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.deploy.secrets import SecretStore
from gpuforge.orchestrate.applied_record import ApplyLocked, apply_lock
from gpuforge.spec.cluster import load_cluster

REPO = Path(__file__).resolve().parents[2]
H100 = REPO / "inventories" / "slurm-h100.yaml"


def test_second_apply_is_refused_naming_the_holder(tmp_path: Path) -> None:
    env = {**os.environ, "GPUFORGE_STATE_DIR": str(tmp_path)}
    os.environ["GPUFORGE_STATE_DIR"] = str(tmp_path)
    try:
        with apply_lock(load_cluster(H100)):
            cp = subprocess.run(
                [sys.executable, "-m", "gpuforge", "apply", "--yes", str(H100)],
                capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
            )  # fmt: skip
            with pytest.raises(ApplyLocked, match=f"pid {os.getpid()}, user "), apply_lock(load_cluster(H100)):
                pass
        assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
        text = " ".join(cp.stderr.split())
        assert f"another gpuforge apply of this spec is running (pid {os.getpid()}, user" in text, text
        with apply_lock(load_cluster(H100)):  # released: the next run gets it
            pass
        lock = next((tmp_path / "locks").iterdir())
        assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    finally:
        del os.environ["GPUFORGE_STATE_DIR"]


def test_a_lock_held_for_another_spec_does_not_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path))
    with apply_lock(load_cluster(H100)), apply_lock(load_cluster(REPO / "inventories" / "lab.yaml")):
        pass


CREATE = """
import sys, time
from pathlib import Path
from gpuforge.deploy.secrets import SecretStore
start = float(sys.argv[2])
while time.time() < start:
    pass
sys.stdout.write(SecretStore("race", Path(sys.argv[1])).munge_key().hex())
"""


def test_concurrent_first_runs_share_one_munge_key(tmp_path: Path) -> None:
    import time

    start = str(time.time() + 1.5)
    procs = [
        subprocess.Popen([sys.executable, "-c", CREATE, str(tmp_path), start], stdout=subprocess.PIPE, cwd=REPO)
        for _ in range(6)
    ]
    keys = {p.communicate(timeout=60)[0] for p in procs}
    assert len(keys) == 1 and len(next(iter(keys))) == 2048
    files = sorted(p.name for p in (tmp_path / "race" / "secrets").iterdir())
    assert files == ["munge.key"]  # no temp file left behind
    assert stat.S_IMODE((tmp_path / "race" / "secrets" / "munge.key").stat().st_mode) == 0o600


def test_losing_the_creation_race_returns_the_winners_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SecretStore("c", tmp_path)
    winner = b"w" * 1024
    real_link = os.link

    def other_process_wins(src: str, dst: str) -> None:
        Path(dst).write_bytes(winner)
        real_link(src, dst)  # raises FileExistsError, as it would

    monkeypatch.setattr(os, "link", other_process_wins)
    assert store.munge_key() == winner
    assert hashlib.sha256(store.munge_key()).digest() == hashlib.sha256(winner).digest()


def _lock_shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, holder: str) -> subprocess.Popen[bytes]:
    from gpuforge.orchestrate import node_lock

    monkeypatch.setattr(node_lock, "LOCK_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(node_lock, "LOCK_FILE", str(tmp_path / "run" / "apply.lock"))
    monkeypatch.setattr(node_lock, "HOLDER_FILE", str(tmp_path / "run" / "apply.holder"))
    return subprocess.Popen(["sh", "-c", node_lock.lock_command(holder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_node_lock_shell_holds_until_stdin_closes_and_names_its_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node-side lock command, run here with its paths under tmp_path (as a node runs it)."""
    first = _lock_shell(monkeypatch, tmp_path, "ann@ctl1 pid 7 since 2026-11-23T10:00:00Z (a.yaml)")
    assert first.stdout is not None and first.stdout.readline() == b"gpuforge-lock: held\n"
    second = _lock_shell(monkeypatch, tmp_path, "bo@laptop pid 9")
    out, _ = second.communicate(timeout=10)
    assert second.returncode == 75
    assert out == b"gpuforge-lock: busy ann@ctl1 pid 7 since 2026-11-23T10:00:00Z (a.yaml)\n"
    first.kill()  # the control host's SSH session dies: the lock goes with it
    first.wait(timeout=10)
    third = _lock_shell(monkeypatch, tmp_path, "bo@laptop pid 9")
    assert third.stdout is not None and third.stdout.readline() == b"gpuforge-lock: held\n"
    assert third.stdin is not None
    third.stdin.close()  # the normal end of a run
    assert third.wait(timeout=10) == 0


@pytest.mark.parametrize(
    ("soft", "hard", "nodes", "want"),
    [
        (1024, 524288, 48, None),  # enough: left alone
        (1024, 524288, 300, 256 + 8 * 300),  # raised to the need
        (1024, 2000, 300, 2000),  # never above the hard limit
        (65536, 524288, 300, None),  # never lowered
    ],
)
def test_open_files_limit_grows_with_the_node_count(
    monkeypatch: pytest.MonkeyPatch, soft: int, hard: int, nodes: int, want: int | None
) -> None:
    from gpuforge.orchestrate import node_lock

    made: list[tuple[int, int]] = []
    monkeypatch.setattr(node_lock.resource, "getrlimit", lambda which: (soft, hard))
    monkeypatch.setattr(node_lock.resource, "setrlimit", lambda which, limits: made.append(limits))
    now = node_lock.raise_open_files_limit(nodes)
    assert made == ([] if want is None else [(want, hard)])
    assert now == (soft if want is None else want)

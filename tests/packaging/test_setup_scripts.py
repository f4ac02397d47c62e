"""The setup scripts as a fresh machine runs them: an interrupted dpkg is finished before apt runs,
and the README scripts run as root without sudo, or re-run themselves under sudo for a user.

Real bash runs the real scripts; ``dpkg``, ``sudo`` and ``id`` are stub programs on PATH whose
answers change with what the script did (dpkg's state lives in a temporary admin dir).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

STUB_DPKG = """#!/bin/sh
# dpkg, as far as repair_interrupted_dpkg uses it: --audit lists half-configured packages while
# $ADMIN/half-configured exists; --configure -a finishes everything (and logs that it ran).
case "$1" in
  --audit) [ -e "$ADMIN/half-configured" ] && echo "The following packages are only half configured:" ;;
  --configure) echo "configure $*" >> "$ADMIN/calls"; rm -f "$ADMIN/half-configured"; rm -f "$ADMIN"/updates/* ;;
esac
exit 0
"""


def stub(bin_dir: Path, name: str, text: str) -> None:
    path = bin_dir / name
    path.write_text(text)
    path.chmod(0o755)


def repair(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub(bin_dir, "dpkg", STUB_DPKG)
    admin = tmp_path / "dpkg"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DPKG_ADMINDIR": str(admin), "ADMIN": str(admin)}
    script = f". {REPO / 'scripts' / 'repair_dpkg.sh'}; repair_interrupted_dpkg"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "dpkg" / "calls"
    return log.read_text().splitlines() if log.exists() else []


def test_an_unfinished_update_is_configured_once_and_said(tmp_path: Path) -> None:
    (tmp_path / "dpkg" / "updates").mkdir(parents=True)
    (tmp_path / "dpkg" / "updates" / "0001").write_text("half written\n")
    first = repair(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "an earlier package run was interrupted (unfinished updates in" in first.stdout
    assert calls(tmp_path) == ["configure --configure -a"]
    second = repair(tmp_path)  # repaired: nothing to do, nothing said
    assert (second.returncode, second.stdout, calls(tmp_path)) == (0, "", ["configure --configure -a"])


def test_a_half_configured_package_is_configured(tmp_path: Path) -> None:
    (tmp_path / "dpkg").mkdir()
    (tmp_path / "dpkg" / "half-configured").touch()
    cp = repair(tmp_path)
    assert "packages dpkg --audit lists as not fully installed" in cp.stdout
    assert calls(tmp_path) == ["configure --configure -a"]


def test_a_clean_dpkg_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "dpkg" / "updates").mkdir(parents=True)
    cp = repair(tmp_path)
    assert (cp.returncode, cp.stdout, calls(tmp_path)) == (0, "", [])


def run_as_user(tmp_path: Path, script: str, with_sudo: bool) -> subprocess.CompletedProcess[str]:
    """``script`` as a non-root user: ``id -u`` says 1000; a stub sudo records what it was asked to run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub(bin_dir, "id", '#!/bin/sh\n[ "$1" = "-u" ] && echo 1000 || /usr/bin/id "$@"\n')
    if with_sudo:
        stub(bin_dir, "sudo", f'#!/bin/sh\necho "$@" > {tmp_path}/sudo-args\n')
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(["bash", f"scripts/{script}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=30)


def test_as_a_user_without_sudo_the_scripts_say_to_run_as_root(tmp_path: Path) -> None:
    for script in ("demo.sh", "test.sh"):
        cp = run_as_user(tmp_path, script, with_sudo=False)
        assert cp.returncode == 2
        assert f"{script[:-3]}: run as root (there is no sudo here to become root with)" in cp.stderr


def test_as_a_user_with_sudo_the_scripts_run_themselves_under_sudo(tmp_path: Path) -> None:
    for script in ("demo.sh", "test.sh"):
        cp = run_as_user(tmp_path, script, with_sudo=True)
        assert cp.returncode == 0, cp.stderr
        args = (tmp_path / "sudo-args").read_text().split()
        assert args[0].startswith("--preserve-env=CI,")
        assert args[1:] == ["bash", str(REPO / "scripts" / script)]

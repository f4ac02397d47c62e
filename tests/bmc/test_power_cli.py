"""``gpuforge power`` against sushy-tools' Redfish emulator on 127.0.0.1 (TLS pinned, basic auth),
with the Slurm controller stubbed through a real shell (tests/bmc/stub_controller.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuforge.bmc.redfish import RedfishSystem
from gpuforge.bmc.transport import Credentials, Endpoint
from tests.bmc.emulator import PASSWORD, USER, Emulator, credentials_file, write_spec
from tests.bmc.stub_controller import StubController, off_and_cycle_are_refused

REPO = Path(__file__).resolve().parents[2]
SECRETS = (PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())


def power(*args: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**env, "GPUFORGE_STATE_DIR": str(folder / "state"), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuforge", "power", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    for secret in SECRETS:  # no output of any run holds the password or the Authorization token
        assert secret not in done.stdout and secret not in done.stderr
    return done


def stub_env(folder: Path) -> dict[str, str]:
    return StubController(folder / "stub").env()


def power_state(emu: Emulator, system: str) -> str | None:
    ep = Endpoint("127.0.0.1", emu.port, emu.fingerprint)
    return RedfishSystem(ep, Credentials(USER, PASSWORD), system).state().power_state


def wait_power(emu: Emulator, system: str, wanted: str, timeout: float = 20) -> str | None:
    """The fake driver applies a change 1 to 11 s after it is asked: poll until ``wanted`` (or time out)."""
    deadline = time.monotonic() + timeout
    seen = power_state(emu, system)
    while seen != wanted and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = power_state(emu, system)
    return seen


@pytest.fixture
def site(tmp_path: Path, emu: Emulator) -> tuple[Path, StubController]:
    credentials_file(tmp_path)
    return write_spec(tmp_path, emu), StubController(tmp_path / "stub")


def test_status_on_off_cycle_change_the_emulated_power(
    site: tuple[Path, StubController], emu: Emulator, tmp_path: Path
) -> None:
    spec, ctl = site
    cpu1 = emu.systems[0]
    st = power("status", str(spec), "--limit", "cpu1", "--json", env=ctl.env(), folder=tmp_path)
    assert st.returncode == 0, st.stderr
    row = json.loads(st.stdout)["nodes"][0]
    assert row == {"node": "cpu1", "protocol": "redfish", "ok": True, "power_state": "Off",
                   "boot_override": {"target": "Hdd", "enabled": "Continuous"}}  # fmt: skip
    on = power("on", str(spec), "--limit", "cpu1", env=ctl.env(fail=True), folder=tmp_path)  # on asks no controller
    assert (on.returncode, on.stdout) == (0, "cpu1: was Off: On sent\n"), on.stderr
    assert wait_power(emu, cpu1, "On") == "On"
    again = power("on", str(spec), "--limit", "cpu1", env=ctl.env(), folder=tmp_path)
    assert (again.returncode, again.stdout) == (0, "cpu1: already On: nothing sent\n")
    ctl.set(sinfo="cpu1|drained\n")
    off = power("off", str(spec), "--limit", "cpu1", env=ctl.env(), folder=tmp_path)
    assert (off.returncode, off.stdout) == (0, "cpu1: was On: ForceOff sent\n"), off.stderr
    assert ctl.calls() == ["sinfo -h -N -n cpu1 -o %N|%T", "squeue -h -w cpu1 -o %N"]
    assert wait_power(emu, cpu1, "Off") == "Off"
    cycle = power("cycle", str(spec), "--limit", "cpu1", env=ctl.env(), folder=tmp_path)
    assert (cycle.returncode, cycle.stdout) == (0, "cpu1: was Off: On sent\n"), cycle.stderr  # off: cycle powers on
    assert wait_power(emu, cpu1, "On") == "On"
    cycle = power("cycle", str(spec), "--limit", "cpu1", "--json", env=ctl.env(), folder=tmp_path)
    row = json.loads(cycle.stdout)["nodes"][0]
    # The emulator does not advertise PowerCycle: ForceRestart, the next in the table, is sent.
    assert (row["reset_type"], row["power_state"]) == ("ForceRestart", "On")
    assert wait_power(emu, cpu1, "On") == "On"


def test_off_of_a_node_in_service_is_refused_and_nothing_is_sent(
    site: tuple[Path, StubController], emu: Emulator, tmp_path: Path
) -> None:
    spec, ctl = site
    before = emu.resets()
    cases = (
        ("cpu2|idle\n", "", "cpu2: in service in Slurm (state idle)"),
        ("cpu2|draining\n", "", "cpu2: in service in Slurm (state draining)"),
        ("cpu2|drained\n", "cpu[1-2]\n", "cpu2: jobs still run on it (state drained, squeue lists them)"),
        ("cpu1|drained\n", "", "cpu2: Slurm does not list it (sinfo)"),
    )
    off_and_cycle_are_refused(power, spec, ctl, tmp_path, cases)
    down = power("off", str(spec), "--limit", "cpu2", env=ctl.env(fail=True), folder=tmp_path)
    assert down.returncode == 2 and "cannot read its Slurm state: ssh: connect to host" in down.stderr
    ctl_node = power("off", str(spec), "--limit", "ctl1", env=ctl.env(), folder=tmp_path)
    assert ctl_node.returncode == 2 and "ctl1: no bmc section in the spec" in ctl_node.stderr
    assert emu.resets() == before


def test_force_powers_off_a_node_in_service_and_says_so(
    site: tuple[Path, StubController], emu: Emulator, tmp_path: Path
) -> None:
    spec, ctl = site
    cpu2 = emu.systems[1]
    assert power("on", str(spec), "--limit", "cpu2", env=ctl.env(), folder=tmp_path).returncode == 0
    assert wait_power(emu, cpu2, "On") == "On"
    ctl.set(sinfo="cpu2|allocated\n", squeue="cpu2\n")
    done = power("off", str(spec), "--limit", "cpu2", "--force", env=ctl.env(), folder=tmp_path)
    assert done.returncode == 0 and done.stdout == "cpu2: was On: ForceOff sent\n", done.stderr
    assert "WARNING: --force: off of nodes in service:\n  cpu2: in service in Slurm (state allocated)" in done.stderr
    assert wait_power(emu, cpu2, "Off") == "Off"


def test_a_wrong_fingerprint_is_refused_and_names_both(emu: Emulator, tmp_path: Path) -> None:
    credentials_file(tmp_path)
    spec = write_spec(tmp_path, emu, fingerprint="ab" * 32)
    done = power("status", str(spec), "--limit", "cpu1,cpu2", env=stub_env(tmp_path), folder=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == (
        f"cpu1: error: BMC 127.0.0.1:{emu.port}: its TLS certificate's SHA-256 fingerprint is {emu.fingerprint}, "
        f"the spec pins {'ab' * 32}: not the pinned BMC, nothing was sent (check bmc.tls_fingerprint)"
    )


def test_wrong_credentials_are_a_clear_error_without_the_password(emu: Emulator, tmp_path: Path) -> None:
    credentials_file(tmp_path, password="wrong-Pa55word-xyz")
    spec = write_spec(tmp_path, emu)
    done = power("status", str(spec), "--limit", "cpu1,cpu2", "--json", env=stub_env(tmp_path), folder=tmp_path)
    assert done.returncode == 1
    rows = json.loads(done.stdout)["nodes"]
    assert [r["error"] for r in rows] == [
        f"BMC 127.0.0.1:{emu.port}: the BMC refused the credentials (HTTP 401); check bmc.credentials_file"
    ] * 2
    assert "wrong-Pa55word-xyz" not in done.stdout + done.stderr


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_credentials_file_others_can_read_is_refused(emu: Emulator, tmp_path: Path, mode: int) -> None:
    credentials_file(tmp_path, mode=mode)
    spec = write_spec(tmp_path, emu)
    before = emu.resets()
    done = power("on", str(spec), "--limit", "cpu1,cpu2", env=stub_env(tmp_path), folder=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        f"node_groups[1].bmc.credentials_file: {tmp_path / 'bmc.cred'}: readable or writable by group or "
        f"others (mode {mode:04o})" in done.stderr
    )
    assert emu.resets() == before


def test_a_credentials_file_that_is_a_link_or_malformed_is_refused(emu: Emulator, tmp_path: Path) -> None:
    real = credentials_file(tmp_path)
    spec = write_spec(tmp_path, emu, cred="link.cred")
    (tmp_path / "link.cred").symlink_to(real)
    done = power("status", str(spec), "--limit", "cpu1,cpu2", env=stub_env(tmp_path), folder=tmp_path)
    assert done.returncode == 2 and "node_groups[1].bmc.credentials_file" in done.stderr
    assert "link.cred: cannot open" in done.stderr
    real.write_text(f"{USER} {PASSWORD}\n")
    spec = write_spec(tmp_path, emu)
    done = power("status", str(spec), "--limit", "cpu1,cpu2", env=stub_env(tmp_path), folder=tmp_path)
    assert done.returncode == 2 and "not 'username:password' on one line" in done.stderr

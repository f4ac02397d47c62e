"""``gpuforge power`` over IPMI 2.0 (RMCP+, UDP) against pyghmi's own BMC server on 127.0.0.1
(tests/bmc/fake_ipmi.py: not a real BMC, not virtualbmc), with the Slurm controller stubbed through
a real shell (tests/bmc/stub_controller.py); and the pure parts of gpuforge.bmc.ipmi."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuforge.bmc.ipmi import chosen_state, error_text, parse_bootdev, parse_power
from gpuforge.bmc.redfish_facts import PowerAction
from gpuforge.bmc.transport import Credentials
from tests.bmc import fake_ipmi
from tests.bmc.fake_ipmi import PASSWORD, FakeBmcs, credentials_file, write_spec
from tests.bmc.stub_controller import StubController, off_and_cycle_are_refused

REPO = Path(__file__).resolve().parents[2]


def power(*args: str, env: dict[str, str], folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**env, "GPUFORGE_STATE_DIR": str(folder / "state"), "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuforge", "power", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert PASSWORD not in done.stdout and PASSWORD not in done.stderr  # no output of any run holds the password
    assert "Traceback" not in done.stderr
    return done


@pytest.fixture
def bmcs(tmp_path: Path) -> Iterator[FakeBmcs]:
    with fake_ipmi.running(tmp_path, count=2) as running:
        yield running


@pytest.fixture
def site(tmp_path: Path, bmcs: FakeBmcs) -> tuple[Path, StubController]:
    credentials_file(tmp_path)
    return write_spec(tmp_path, bmcs.ports), StubController(tmp_path / "stub")


def test_status_on_off_cycle_change_the_fake_chassis(
    site: tuple[Path, StubController], bmcs: FakeBmcs, tmp_path: Path
) -> None:
    spec, ctl = site
    port = bmcs.ports[0]
    st = power("status", str(spec), "--limit", "cpu1", "--json", env=ctl.env(), folder=tmp_path)
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["nodes"] == [
        {"node": "cpu1", "protocol": "ipmi", "ok": True, "power_state": "Off",
         "boot_override": {"target": "hd", "enabled": "Once"}}
    ]  # fmt: skip
    on = power("on", str(spec), "--limit", "cpu1", env=ctl.env(fail=True), folder=tmp_path)  # on asks no controller
    assert (on.returncode, on.stdout) == (0, "cpu1: was Off: on sent\n"), on.stderr
    assert bmcs.controls() == [f"{port} power_on"]
    again = power("on", str(spec), "--limit", "cpu1", env=ctl.env(), folder=tmp_path)
    assert (again.returncode, again.stdout) == (0, "cpu1: already On: nothing sent\n")
    assert bmcs.controls() == [f"{port} power_on"]
    ctl.set(sinfo="cpu1|drained\n")
    off = power("off", str(spec), "--limit", "cpu1", env=ctl.env(), folder=tmp_path)
    assert (off.returncode, off.stdout) == (0, "cpu1: was On: off sent\n"), off.stderr
    assert ctl.calls() == ["sinfo -h -N -n cpu1 -o %N|%T", "squeue -h -w cpu1 -o %N"]
    cycle = power("cycle", str(spec), "--limit", "cpu1", env=ctl.env(), folder=tmp_path)
    assert (cycle.returncode, cycle.stdout) == (0, "cpu1: was Off: on sent\n"), cycle.stderr  # off: cycle powers on
    cycle = power("cycle", str(spec), "--limit", "cpu1", "--json", env=ctl.env(), folder=tmp_path)
    row = json.loads(cycle.stdout)["nodes"][0]
    assert (row["protocol"], row["reset_type"], row["power_state"]) == ("ipmi", "reset", "On")
    assert bmcs.controls() == [f"{port} power_{c}" for c in ("on", "off", "on", "reset")]
    st = power("status", str(spec), "--limit", "cpu[1-2]", env=ctl.env(), folder=tmp_path)
    assert st.stdout == "cpu1: On, boot override hd (Once)\ncpu2: Off, boot override hd (Once)\n"


def test_off_of_a_node_in_service_is_refused_and_nothing_is_sent(
    site: tuple[Path, StubController], bmcs: FakeBmcs, tmp_path: Path
) -> None:
    spec, ctl = site
    assert power("on", str(spec), "--limit", "cpu2", env=ctl.env(), folder=tmp_path).returncode == 0
    cases = (
        ("cpu2|idle\n", "", "cpu2: in service in Slurm (state idle)"),
        ("cpu2|drained\n", "cpu[1-2]\n", "cpu2: jobs still run on it (state drained, squeue lists them)"),
    )
    off_and_cycle_are_refused(power, spec, ctl, tmp_path, cases)
    assert bmcs.controls() == [f"{bmcs.ports[1]} power_on"]
    ctl.set(sinfo="cpu2|allocated\n", squeue="cpu2\n")
    forced = power("off", str(spec), "--limit", "cpu2", "--force", env=ctl.env(), folder=tmp_path)
    assert (forced.returncode, forced.stdout) == (0, "cpu2: was On: off sent\n"), forced.stderr
    assert "WARNING: --force: off of nodes in service:\n  cpu2: in service in Slurm (state allocated)" in forced.stderr
    assert bmcs.controls() == [f"{bmcs.ports[1]} power_on", f"{bmcs.ports[1]} power_off"]


def test_a_wrong_password_is_a_clear_error_without_the_password(bmcs: FakeBmcs, tmp_path: Path) -> None:
    credentials_file(tmp_path, password="wrong-Pa55word-xyz")
    spec = write_spec(tmp_path, bmcs.ports)
    env = StubController(tmp_path / "stub").env()
    done = power("on", str(spec), "--limit", "cpu1,cpu2", "--json", env=env, folder=tmp_path)
    assert done.returncode == 1
    assert [r["error"] for r in json.loads(done.stdout)["nodes"]] == [
        f"BMC 127.0.0.1:{port}: the BMC refused the credentials (wrong password); check bmc.credentials_file"
        for port in bmcs.ports
    ]
    assert "wrong-Pa55word-xyz" not in done.stdout + done.stderr
    assert bmcs.controls() == []


def test_a_bmc_that_does_not_answer_is_a_bounded_clear_error(tmp_path: Path) -> None:
    credentials_file(tmp_path)
    port = fake_ipmi.free_udp_port()  # nothing listens there
    spec = write_spec(tmp_path, [port, port + 1 if port < 65535 else port - 1])
    start = time.monotonic()
    done = power("status", str(spec), "--limit", "cpu1", env=StubController(tmp_path / "stub").env(), folder=tmp_path)
    assert time.monotonic() - start < 60
    assert (done.returncode, done.stdout) == (
        1,
        f"cpu1: error: BMC 127.0.0.1:{port}: no answer over IPMI (UDP): is it the BMC's address and port, "
        "and is IPMI over LAN enabled?\n",
    ), done.stderr


def test_pyghmi_answers_become_rows_and_actions() -> None:
    assert parse_power({"powerstate": "on"}) == "On" and parse_power({"powerstate": "off"}) == "Off"
    assert parse_power({"powerstate": "dunno"}) is None and parse_power(None) is None
    assert parse_bootdev({"bootdev": "network", "persistent": True, "uefimode": False}) == ("network", "Continuous")
    assert parse_bootdev({"bootdev": "hd", "persistent": False}) == ("hd", "Once")
    assert parse_bootdev({"bootdev": "default", "persistent": True}) == ("default", "Disabled")
    assert parse_bootdev({"bootdev": 9, "persistent": "x"}) == ("9", None)
    assert [chosen_state(a, "On") for a in PowerAction] == [None, "off", "reset"]
    assert [chosen_state(a, "Off") for a in PowerAction] == ["on", None, "on"]


def test_error_texts_never_hold_the_password() -> None:
    creds = Credentials("admin", "topsecret")
    assert error_text(Exception(None), creds).startswith("no answer over IPMI (UDP)")
    assert error_text(Exception("Incorrect password provided"), creds).startswith("the BMC refused the credentials")
    assert error_text(Exception("Unauthorized name"), creds) == "IPMI: Unauthorized name"
    assert error_text(Exception("bad topsecret\nhere"), creds) == "IPMI: bad *** here"

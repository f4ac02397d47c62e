"""``gpuforge power bootdev`` through the real CLI: against sushy-tools' Redfish emulator (the session's,
systems 3 and 4, which the power tests do not touch), a minimal Redfish double with ETags
(tests/bmc/redfish_double.py: the emulator sends none), and pyghmi's own BMC server over UDP
(tests/bmc/fake_ipmi.py). Every run's output is searched for the password (the ``power`` helpers)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bmc import fake_ipmi, redfish_double
from tests.bmc.emulator import Emulator, credentials_file, make_cert, spec_with_bmcs, write_spec
from tests.bmc.fake_ipmi import FakeBmcs
from tests.bmc.redfish_double import SYSTEM, Double
from tests.bmc.stub_controller import StubController
from tests.bmc.test_ipmi_power import power as ipmi_power
from tests.bmc.test_power_cli import power


@pytest.fixture
def rf_site(tmp_path: Path, emu: Emulator) -> tuple[Path, dict[str, str]]:
    credentials_file(tmp_path)
    env = StubController(tmp_path / "stub").env(fail=True)  # bootdev never asks the controller
    return write_spec(tmp_path, emu, first=2), env


def test_redfish_pxe_once_is_one_patch_read_back_by_status(
    rf_site: tuple[Path, dict[str, str]], emu: Emulator, tmp_path: Path
) -> None:
    spec, env = rf_site
    cpu1, cpu2 = emu.systems[2:4]
    before = (emu.patches(cpu1), emu.patches(cpu2))
    done = power("bootdev", str(spec), "--target", "pxe", "--limit", "cpu1", env=env, folder=tmp_path)
    # sushy-tools ignores BootSourceOverrideEnabled and always shows Continuous (main.py's NOTE): read back so
    assert (done.returncode, done.stdout) == (
        0,
        "cpu1: boot override Pxe (Once) sent; was Hdd (Continuous), reads back Pxe (Continuous)\n",
    ), done.stderr
    assert (emu.patches(cpu1), emu.patches(cpu2)) == (before[0] + 1, before[1])
    st = power("status", str(spec), "--limit", "cpu[1-2]", env=env, folder=tmp_path)
    assert st.stdout == "cpu1: Off, boot override Pxe (Continuous)\ncpu2: Off, boot override Hdd (Continuous)\n"
    again = power("bootdev", str(spec), "--target", "pxe", "--persistent", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (again.returncode, again.stdout) == (0, "cpu1: boot override already Pxe (Continuous): nothing sent\n")
    disk = power(
        "bootdev",
        str(spec),
        "--target",
        "DISK",
        "--persistent",
        "--limit",
        "cpu[1-2]",
        "--json",
        env=env,
        folder=tmp_path,
    )
    rows = json.loads(disk.stdout)["nodes"]
    assert disk.returncode == 0 and [r["sent"] for r in rows] == ["Hdd (Continuous)", None]
    assert rows[0]["was"] == {"target": "Pxe", "enabled": "Continuous"}
    assert rows[0]["boot_override"] == {"target": "Hdd", "enabled": "Continuous"}
    assert (emu.patches(cpu1), emu.patches(cpu2)) == (before[0] + 2, before[1])


def test_redfish_a_target_the_system_does_not_allow_is_refused_naming_the_node(
    rf_site: tuple[Path, dict[str, str]], emu: Emulator, tmp_path: Path
) -> None:
    spec, env = rf_site
    before = [emu.patches(s) for s in emu.systems[2:4]]
    done = power("bootdev", str(spec), "--target", "none", "--limit", "cpu1,cpu2", env=env, folder=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"cpu{i}: error: BMC 127.0.0.1:{emu.port}: /redfish/v1/Systems/{system}: it does not allow "
        "BootSourceOverrideTarget None (it allows Pxe, Cd, Hdd, UefiHttp)"
        for i, system in enumerate(emu.systems[2:4], start=1)
    ]
    assert [emu.patches(s) for s in emu.systems[2:4]] == before


def test_a_bad_target_or_persistent_none_is_exit_2_before_any_bmc_is_asked(
    rf_site: tuple[Path, dict[str, str]], emu: Emulator, tmp_path: Path
) -> None:
    spec, env = rf_site
    before = emu.log.read_text(errors="replace")
    bad = power("bootdev", str(spec), "--target", "usb", env=env, folder=tmp_path)
    assert bad.returncode == 2 and bad.stdout == "" and "Invalid value for '--target'" in bad.stderr
    none = power("bootdev", str(spec), "--target", "none", "--persistent", env=env, folder=tmp_path)
    assert none.returncode == 2 and none.stdout == ""
    assert "gpuforge power: --persistent means nothing with --target none" in none.stderr
    assert emu.log.read_text(errors="replace") == before  # not one request


@pytest.fixture
def double(tmp_path: Path) -> Iterator[tuple[Double, Path]]:
    cert, key, fingerprint = make_cert(tmp_path)
    boot = {
        "BootSourceOverrideEnabled": "Disabled",
        "BootSourceOverrideTarget": "None",
        "BootSourceOverrideMode": "UEFI",
        "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd"],
    }
    running, server = redfish_double.start(cert, key, boot)
    credentials_file(tmp_path)
    bmc = {"addresses": ["127.0.0.1"], "port": running.port, "credentials_file": "bmc.cred",
           "tls_fingerprint": fingerprint, "system_id": "1"}  # fmt: skip
    yield running, spec_with_bmcs(tmp_path, [bmc, {**bmc, "addresses": ["127.0.0.2"]}])
    server.shutdown()
    server.server_close()


def test_redfish_the_patch_carries_if_match_and_keeps_the_boot_mode(
    double: tuple[Double, Path], tmp_path: Path
) -> None:
    running, spec = double
    env = StubController(tmp_path / "stub").env(fail=True)
    done = power("bootdev", str(spec), "--target", "pxe", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (done.returncode, done.stdout) == (
        0,
        "cpu1: boot override Pxe (Once) sent; was None (Disabled), reads back Pxe (Once)\n",
    ), done.stderr
    patches = [s for s in running.seen if s.method == "PATCH"]
    assert [(p.path, p.headers.get("If-Match"), p.body) for p in patches] == [
        (SYSTEM, 'W/"1"', {"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once",
                                    "BootSourceOverrideMode": "UEFI"}}),
    ]  # fmt: skip
    assert [s.method for s in running.seen] == ["GET", "PATCH", "GET"]
    off = power("bootdev", str(spec), "--target", "none", "--limit", "cpu1", env=env, folder=tmp_path)
    assert off.stdout == "cpu1: boot override None (Disabled) sent; was Pxe (Once), reads back None (Disabled)\n"
    assert [p.headers.get("If-Match") for p in running.seen if p.method == "PATCH"] == ['W/"1"', 'W/"2"']


def test_redfish_a_refused_patch_names_the_node_and_exits_1(double: tuple[Double, Path], tmp_path: Path) -> None:
    running, spec = double
    running.stale = True
    env = StubController(tmp_path / "stub").env(fail=True)
    done = power("bootdev", str(spec), "--target", "disk", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (done.returncode, done.stdout) == (
        1,
        f"cpu1: error: BMC 127.0.0.1:{running.port}: PATCH {SYSTEM}: HTTP 412: The ETag supplied did not match the "
        "ETag required to change this resource.\n",
    )
    assert running.boot["BootSourceOverrideTarget"] == "None"


@pytest.fixture
def bmcs(tmp_path: Path) -> Iterator[FakeBmcs]:
    with fake_ipmi.running(tmp_path, count=2) as running:
        yield running


def test_ipmi_network_once_then_nothing_then_none(bmcs: FakeBmcs, tmp_path: Path) -> None:
    fake_ipmi.credentials_file(tmp_path)
    spec = fake_ipmi.write_spec(tmp_path, bmcs.ports)
    env = StubController(tmp_path / "stub").env(fail=True)
    port = bmcs.ports[0]
    done = ipmi_power("bootdev", str(spec), "--target", "pxe", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (done.returncode, done.stdout) == (
        0,
        "cpu1: boot override network (Once) sent; was hd (Once), reads back network (Once)\n",
    ), done.stderr
    assert bmcs.boot_sets() == [f"{port} network"]
    again = ipmi_power("bootdev", str(spec), "--target", "pxe", "--once", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (again.returncode, again.stdout) == (0, "cpu1: boot override already network (Once): nothing sent\n")
    st = ipmi_power("status", str(spec), "--limit", "cpu[1-2]", "--json", env=env, folder=tmp_path)
    assert [r["boot_override"] for r in json.loads(st.stdout)["nodes"]] == [
        {"target": "network", "enabled": "Once"},
        {"target": "hd", "enabled": "Once"},
    ]
    # pyghmi's server keeps the device only: a persistent request reads back as one-time
    kept = ipmi_power(
        "bootdev", str(spec), "--target", "disk", "--persistent", "--limit", "cpu2", env=env, folder=tmp_path
    )
    assert kept.stdout == "cpu2: boot override hd (Continuous) sent; was hd (Once), reads back hd (Once)\n"
    off = ipmi_power("bootdev", str(spec), "--target", "none", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (
        off.stdout == "cpu1: boot override default (Disabled) sent; was network (Once), reads back default (Disabled)\n"
    )
    assert bmcs.boot_sets() == [f"{port} network", f"{bmcs.ports[1]} hd", f"{port} default"]
    assert bmcs.controls() == []  # no power change


def test_ipmi_a_bmc_that_does_not_answer_names_the_node(tmp_path: Path) -> None:
    fake_ipmi.credentials_file(tmp_path)
    port = fake_ipmi.free_udp_port()  # nothing listens there
    spec = fake_ipmi.write_spec(tmp_path, [port, port + 1 if port < 65535 else port - 1])
    env = StubController(tmp_path / "stub").env(fail=True)
    done = ipmi_power("bootdev", str(spec), "--target", "pxe", "--limit", "cpu1", env=env, folder=tmp_path)
    assert (done.returncode, done.stdout) == (
        1,
        f"cpu1: error: BMC 127.0.0.1:{port}: no answer over IPMI (UDP): is it the BMC's address and port, "
        "and is IPMI over LAN enabled?\n",
    ), done.stderr

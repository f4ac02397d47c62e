"""Fake IPMI BMCs: pyghmi's own BMC server class (``pyghmi.ipmi.bmc.Bmc``, what virtualbmc is built
on) with an in-memory chassis (power, boot device), one per UDP port on 127.0.0.1, all in one
subprocess (``python -m tests.bmc.fake_ipmi LOG USER PASSWORD PORT...``), and helpers to start
it and write a spec that points at it. Every chassis control and every boot device it is set to is
a line of LOG. As pyghmi's server does, it keeps the device only: the persistent bit of Set System
Boot Options is not read, and Get System Boot Options always answers a one-time override.

pyghmi 1.6.19's client opens RMCP+ proposing cipher suite 17 (RAKP-HMAC-SHA256) and falls back to
suite 3 (RAKP-HMAC-SHA1) when the BMC refuses; its server only implements suite 3 but accepts any
proposal, so client and server then disagree on the HMAC. The fake refuses any proposal but
RAKP-HMAC-SHA1 (RMCP+ status 0x11, "no cipher suite match"), as a suite-3-only BMC does: what the
tests exercise is suite 3.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bmc.emulator import spec_with_bmcs

USER, PASSWORD = "gpuforge-ipmi", "ipmi-Pa55-not-shown"  # IPMI 2.0: a user name of 16 bytes at most, password 20
REPO = Path(__file__).resolve().parents[2]


@dataclass
class FakeBmcs:
    ports: list[int]
    log: Path

    def controls(self) -> list[str]:
        """The chassis controls received so far, in order (``port power_on`` ...)."""
        return [line for line in self.log.read_text().splitlines() if " power_" in line]

    def boot_sets(self) -> list[str]:
        """The boot devices set so far, in order (``port network`` ...)."""
        return [
            line.replace(" set_boot_device", "") for line in self.log.read_text().splitlines() if " set_boot_" in line
        ]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(folder: Path, count: int) -> Iterator[FakeBmcs]:
    """``count`` fake BMCs (chassis off, boot device hd) until the block ends."""
    ports = [free_udp_port() for _ in range(count)]
    log = folder / "fake-ipmi.log"
    argv = [sys.executable, "-m", "tests.bmc.fake_ipmi", str(log), USER, PASSWORD, *map(str, ports)]
    with (folder / "fake-ipmi.out").open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (log.exists() and "ready" in log.read_text()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fake IPMI BMCs did not start: {(folder / 'fake-ipmi.out').read_text()[-2000:]}")
            time.sleep(0.1)
        yield FakeBmcs(ports, log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def write_spec(folder: Path, ports: list[int], cred: str = "bmc.cred") -> Path:
    """The two-node spec of tests/bmc, each compute node behind its own fake BMC (IPMI)."""
    bmcs: list[dict[str, object]] = [
        {"protocol": "ipmi", "addresses": ["127.0.0.1"], "port": port, "credentials_file": cred} for port in ports[:2]
    ]
    return spec_with_bmcs(folder, bmcs)


def credentials_file(folder: Path, password: str = PASSWORD) -> Path:
    path = folder / "bmc.cred"
    path.write_text(f"{USER}:{password}\n")
    path.chmod(0o600)
    return path


def _serve(log: Path, user: str, password: str, ports: list[int]) -> None:
    """The server side (in the subprocess): pyghmi's Bmc per port, chassis state in memory."""
    import pyghmi.ipmi.bmc as bmc
    import pyghmi.ipmi.private.serversession as serversession

    class Suite3Session(serversession.ServerSession):  # type: ignore[misc]
        def create_open_session_response(self, request: Any) -> Any:
            if request[12] != 1:  # the proposed authentication algorithm is not RAKP-HMAC-SHA1
                return bytearray([request[0], 0x11, 0, 0]) + request[4:8] + bytearray(4)
            return super().create_open_session_response(request)

    serversession.ServerSession = Suite3Session

    def note(line: str) -> None:
        with log.open("a") as f:
            f.write(line + "\n")

    class Chassis(bmc.Bmc):  # type: ignore[misc]
        def __init__(self, port: int) -> None:
            super().__init__({user: password}, port=port, address="127.0.0.1")
            self.power, self.boot = "off", "hd"

        def get_power_state(self) -> str:
            return self.power

        def power_on(self) -> None:
            note(f"{self.port} power_on")
            self.power = "on"

        def power_off(self) -> None:
            note(f"{self.port} power_off")
            self.power = "off"

        def power_reset(self) -> None:
            note(f"{self.port} power_reset")

        def power_cycle(self) -> None:
            note(f"{self.port} power_cycle")

        def get_boot_device(self) -> str:
            return self.boot

        def set_boot_device(self, device: str) -> None:
            note(f"{self.port} set_boot_device {device}")
            self.boot = device

    for port in ports:
        Chassis(port)
    note("ready")
    bmc.Bmc.listen()


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3], [int(p) for p in sys.argv[4:]])

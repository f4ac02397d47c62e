"""One sushy-tools Redfish emulator for the whole session (tests/bmc/emulator.py), stopped at the end."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.bmc import emulator
from tests.bmc.emulator import Emulator


@pytest.fixture(scope="session")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    folder = tmp_path_factory.mktemp("redfish")
    running, proc = emulator.start(folder, count=6)
    try:
        yield running
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except Exception:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

"""The provisioning tests' shared fixture: a folder dnsmasq's unprivileged user can read."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def work() -> Iterator[Path]:
    """A folder dnsmasq's unprivileged user can read (its TFTP root is in it): 0755, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="gfpxe-"))
    folder.chmod(0o755)
    tftp = folder / "tftp"
    tftp.mkdir(mode=0o755)
    for name in ("undionly.kpxe", "ipxe.efi"):
        (tftp / name).write_bytes(f"iPXE stand-in: {name}\n".encode())
        (tftp / name).chmod(0o644)
    yield folder
    shutil.rmtree(folder)

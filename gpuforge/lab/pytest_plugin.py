"""pytest plugin: a session-wide lab of real nodes, and auto-skip of ``lab`` tests where none can run.

Enable it with ``pytest_plugins = ["gpuforge.lab.pytest_plugin"]`` in ``tests/conftest.py``. Then::

    @pytest.mark.lab
    def test_something(lab):
        cp = lab.ssh("node1", "systemctl is-system-running")
        assert cp.returncode == 0, cp.stderr

The lab (``gflab-test``, 10.213.9.0/24, 3 nodes) comes up once per session and is always torn
down at the end, also when a test fails, ``up`` fails or the run is interrupted (Ctrl-C, SIGTERM).
Two test sessions on one machine take turns (a file lock) instead of tearing down each other's lab.
Lab tests with labs of their own (HA, the Slurm upgrade, 24 nodes, the baked image, Kubernetes) are
marked ``lab_beside``, the VM tests ``lab_vm``: ``scripts/test.sh`` runs each set in a pytest of its own
beside the session lab's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import IO

import pytest

from . import core, plan
from .lab_record import STATE_ROOT, LabState, SharedFolder
from .rootfs import cached_rootfs
from .sources import SUITE
from .system import BUILD_TOOLS, REQUIRED_TOOLS, missing_tools

LAB_NAME = "gflab-test"
LAB_SUBNET = "10.213.9.0/24"
LAB_NODES = 3


def lab_unavailable_reason() -> str | None:
    """Why lab tests cannot run here (``None`` if they can)."""
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces, bridges, systemd-nspawn)"
    tools = dict(REQUIRED_TOOLS)
    if cached_rootfs(SUITE) is None:
        tools.update(BUILD_TOOLS)
    missing = missing_tools(tools)
    if missing:
        pkgs = " ".join(sorted(set(missing.values())))
        return f"lab tests need {', '.join(sorted(missing))} (apt-get install {pkgs})"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends the run as Ctrl-C does (every lab's ``finally`` runs: nothing left up), also in a
    run that has no session lab (``scripts/test.sh`` stops its second lab run this way)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``lab`` with the reason when this machine cannot run the lab. A test marked
    ``lab_beside`` or ``lab_vm`` (run beside the others by ``scripts/test.sh``) must not use the session lab."""
    lab_items = [i for i in items if i.get_closest_marker("lab") is not None]
    for marker in ("lab_beside", "lab_vm"):
        sharing = [
            i.nodeid for i in lab_items if i.get_closest_marker(marker) and "lab" in getattr(i, "fixturenames", ())
        ]
        if sharing:
            raise pytest.UsageError(f"marked {marker} but uses the session lab (fixture 'lab'): {', '.join(sharing)}")
    reason = lab_unavailable_reason() if lab_items else None
    if reason:
        for item in lab_items:
            item.add_marker(pytest.mark.skip(reason=reason))


class Lab:
    """A running lab as the tests see it."""

    def __init__(self, name: str, nodes: int, subnet: str, state: LabState) -> None:
        self.name, self.nodes, self.subnet, self.state = name, nodes, subnet, state

    def ssh(self, node: str, cmd: str | Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` on ``node`` as root over SSH (host-key checking on); capture its output."""
        command = [cmd] if isinstance(cmd, str) else list(cmd)
        return subprocess.run(
            core.ssh_command(self.state, node, command),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def up(self, nodes: int | None = None) -> LabState:
        """Run ``up`` again (repairs or grows the lab) and refresh :attr:`state`."""
        self.nodes = nodes or self.nodes
        self.state = core.up(self.name, self.nodes, self.subnet)
        return self.state

    def pids(self) -> dict[str, int]:
        """systemd-nspawn pid per running node."""
        return core.node_pids(self.name)


@contextlib.contextmanager
def own_lab(
    name: str, nodes: int, subnet: str, shared: Sequence[SharedFolder] = (), releases: Sequence[str] = ()
) -> Iterator[Lab]:
    """A test's own lab beside the session's (another name and subnet), taken down whatever happens;
    ``shared``: host folders bind-mounted into some nodes, the lab's stand-in for shared storage;
    ``releases``: ``lab up --os`` values (``debian13``, ``node2=debian12``)."""
    core.down(name, log=lambda m: None)
    try:
        chosen = plan.parse_releases(releases, nodes)
        yield Lab(name, nodes, subnet, core.up(name, nodes, subnet, log=print, shared=shared, releases=chosen))
    finally:
        core.down(name, log=lambda m: None)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """Bring the test lab up once; always tear it down afterwards."""
    reason = lab_unavailable_reason()
    if reason:
        pytest.skip(reason)
    lock = _session_lock()
    try:
        core.down(LAB_NAME, log=lambda m: None)  # leftovers of a crashed earlier run
        state = core.up(LAB_NAME, LAB_NODES, LAB_SUBNET)
        yield Lab(LAB_NAME, LAB_NODES, LAB_SUBNET, state)
    finally:
        try:
            core.down(LAB_NAME, log=lambda m: None)
        finally:
            lock.close()


def _session_lock() -> IO[str]:
    """Hold the test lab for this session: a second session on the machine waits its turn
    instead of tearing down a lab that another one is using."""
    path = os.path.join(STATE_ROOT, f".{LAB_NAME}.session.lock")
    os.makedirs(STATE_ROOT, exist_ok=True)
    f = open(path, "a")  # noqa: SIM115 - held for the whole session, closed in the fixture
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.stderr.write(f"\nlab {LAB_NAME} is in use by another test session; waiting for it to finish\n")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f

"""Simulated nodes for the whole pyinfra path, without a lab: a connector that records every
command and upload a run sends, and answers with scripted output (a fresh node: no output).

``simulated(monkeypatch, ...)`` makes every host the deploys build use ``SimulatedConnector``;
node locks are taken by running the real lock command locally on a lock file under the test's
directory (no SSH). Nothing leaves this process but that local shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import StringCommand
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.util import get_file_io
from pyinfra.connectors.base import BaseConnector
from pyinfra.connectors.util import CommandOutput, OutputLine

from tests import yaml_text

#: (host, command) -> (ok, output lines) or None for the default (success, no output).
Responder = Callable[[str, str], "tuple[bool, list[str]] | None"]


@dataclass
class SimulatedCluster:
    """What the simulated nodes were sent, per host, in order."""

    commands: dict[str, list[str]] = field(default_factory=dict)
    uploads: dict[str, list[tuple[str, bytes]]] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    responders: list[Responder] = field(default_factory=list)
    #: host -> a regex: the node goes away when a command matching it runs (paramiko's EOFError)
    dies_at: dict[str, str] = field(default_factory=dict)

    def respond(self, pattern: str, lines: list[str], ok: bool = True, host: str | None = None) -> None:
        """Answer commands matching ``pattern`` (a regex searched in the command) with ``lines``."""
        regex = re.compile(pattern)

        def responder(h: str, command: str) -> tuple[bool, list[str]] | None:
            if (host is None or h == host) and regex.search(command):
                return ok, lines
            return None

        self.responders.insert(0, responder)

    def answer(self, host: str, command: str) -> tuple[bool, list[str]]:
        self.commands.setdefault(host, []).append(command)
        if host in self.dies_at and re.search(self.dies_at[host], command):
            raise EOFError  # what paramiko raises when the node powers off mid-command
        for responder in self.responders:
            got = responder(host, command)
            if got is not None:
                return got
        return True, []


class SimulatedConnector(BaseConnector):
    """A pyinfra connector whose host is a ``SimulatedCluster`` entry."""

    handles_execution = True
    cluster: SimulatedCluster = SimulatedCluster()

    @staticmethod
    def make_names_data(name: str | None = None) -> Any:  # pragma: no cover - hosts are built by gpuforge
        yield name, {}, []

    def connect(self) -> None:
        if self.host.name in self.cluster.unreachable:
            raise ConnectError(f"{self.host.name}: no route to host (simulated)")

    def run_shell_command(
        self, command: StringCommand, print_output: bool = False, print_input: bool = False, **arguments: Any
    ) -> tuple[bool, CommandOutput]:
        text = command.get_raw_value() if isinstance(command, StringCommand) else str(command)
        ok, lines = self.cluster.answer(self.host.name, text)
        stream = "stdout" if ok else "stderr"
        return ok, CommandOutput([OutputLine(stream, line) for line in lines])

    def put_file(
        self,
        filename_or_io: Any,
        remote_filename: str,
        remote_temp_filename: str | None = None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Any,
    ) -> bool:
        with get_file_io(filename_or_io) as f:
            data = f.read()
        data = data.encode() if isinstance(data, str) else data
        self.cluster.uploads.setdefault(self.host.name, []).append((remote_filename, data))
        return True

    def get_file(self, *args: Any, **kwargs: Any) -> bool:
        return False


def simulated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    """Route every pyinfra host to a fresh ``SimulatedCluster``; node locks taken locally."""
    import pyinfra.api.inventory as pyinfra_inventory

    cluster = SimulatedCluster()
    monkeypatch.setattr(SimulatedConnector, "cluster", cluster)
    connectors = {"ssh": SimulatedConnector, "vagrant": SimulatedConnector}
    monkeypatch.setattr(pyinfra_inventory, "get_execution_connectors", lambda: connectors)
    monkeypatch.setattr(pyinfra_inventory, "get_all_connectors", lambda: connectors)
    lock_nodes_locally(monkeypatch, tmp_path / "node-locks", cluster.unreachable)
    return cluster


def lock_nodes_locally(monkeypatch: pytest.MonkeyPatch, where: Path, unreachable: set[str] | None = None) -> None:
    """Node locks taken by the real lock command on a local file per node under ``where`` (no SSH);
    a node in ``unreachable`` answers as ssh does when there is no route."""
    from gpuforge.orchestrate import node_lock

    def local_lock(cluster: Any, name: str, command: str, options: tuple[str, ...] = ()) -> list[str]:
        if unreachable is not None and name in unreachable:
            return ["sh", "-c", "echo 'ssh: connect to host: No route to host' >&2; exit 255"]
        return ["sh", "-c", command.replace(node_lock.LOCK_DIR, shlex.quote(str(where / name)))]

    monkeypatch.setattr(node_lock, "ssh_argv", local_lock)


def write_simulated_spec(data: dict[str, Any], where: Path, name: str) -> Path:
    """Write spec ``data`` under ``where`` with placeholder SSH key and known_hosts files there
    (preflight wants them readable; nothing connects over SSH to simulated nodes)."""
    (where / "id").write_text("not a key: nothing connects over SSH here\n")
    (where / "known_hosts").write_text("")
    data["ssh"]["key"] = str(where / "id")
    data["ssh"]["known_hosts"] = str(where / "known_hosts")
    path = where / name
    path.write_text(yaml_text.dump(data, sort_keys=False))
    return path


#: The health program's size in a plan's upload summary: it changes with every edit of the node
#: program's code (whose own tests cover it), so the goldens keep a placeholder instead.
_HEALTH_PROGRAM_SIZE = re.compile(r"(/usr/local/sbin/gpuforge-health \()\d+ bytes")


def assert_golden_plan(result: Any, name: str, golden_dir: Path) -> dict[str, Any]:
    """The plan of ``name`` (steps, not diffs) equals ``golden_dir/<name>.json``; returns it.

    GPUFORGE_UPDATE_GOLDEN=1 rewrites the file instead (then review the diff).
    """
    import json
    import os

    assert result.ok, result.errors
    full = result.as_dict()["hosts"][name]
    got = {
        "error": full["error"],
        "operations": [{k: v for k, v in op.items() if k != "diffs"} for op in full["operations"]],
    }
    got = json.loads(_HEALTH_PROGRAM_SIZE.sub(r"\1<size> bytes", json.dumps(got)))
    golden = golden_dir / f"{name}.json"
    if os.environ.get("GPUFORGE_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(got, indent=1) + "\n")
    assert golden.is_file(), f"{golden} is missing (GPUFORGE_UPDATE_GOLDEN=1 writes it)"
    assert got == json.loads(golden.read_text())
    return got

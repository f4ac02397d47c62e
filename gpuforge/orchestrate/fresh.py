"""``gpuforge plan --fresh``: what a FRESH node of each group's platform would get, connecting to nothing.

Every host is served by :class:`FreshConnector`: a pyinfra connector that records each command and
answers as a freshly installed node of the group's platform row would: its ``/etc/os-release``
(``Distribution.os_release``) and ``uname -m``, nothing else (an empty package database, no files,
no units, no accounts), every command succeeding. The deploys run in dry-run mode, so the plan is
the one apply would make on such a node, with the platform's own package manager and names.

Invariants: nothing leaves this process (no SSH, no node lock, the SSH key is not read); one node
per group (the first of its hostlist) stands for the group; the spec is checked as ``plan`` checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from pyinfra.api import StringCommand
from pyinfra.connectors.base import BaseConnector
from pyinfra.connectors.util import CommandOutput, OutputLine

from gpuforge.deploy.runstate import RunState
from gpuforge.orchestrate import apply
from gpuforge.orchestrate.plan import PlanResult, shown_ops
from gpuforge.spec import Spec, load_spec, resolve_nodes
from gpuforge.spec.platforms import platform_for

#: What a fresh node's os-release read looks like (probes.platform and the readings that cat it).
OS_RELEASE = "/etc/os-release"


def fresh_answer(spec: Spec, host: str, command: str) -> list[str]:
    """A fresh node's output for ``command``: its os-release and machine when read, nothing else."""
    if OS_RELEASE not in command and "uname -m" not in command:
        return []
    node = next(n for n in resolve_nodes(spec) if n.name == host)
    platform = platform_for(node.os, node.arch)
    os_id, version = platform.distribution.os_release
    lines = [f"ID={os_id}", f'VERSION_ID="{version}"'] if OS_RELEASE in command else []
    return [*lines, platform.arch.value] if "uname -m" in command else lines


class FreshConnector(BaseConnector):
    """A pyinfra connector whose host is a fresh node (``fresh_answer``); it records what it is sent."""

    handles_execution = True
    answer: ClassVar[Callable[[str, str], list[str]]] = staticmethod(lambda host, command: [])
    sent: ClassVar[dict[str, list[str]]] = {}

    @staticmethod
    def make_names_data(name: str | None = None) -> Any:  # pragma: no cover - hosts are built by gpuforge
        yield name, {}, []

    def connect(self) -> None:
        return None

    def run_shell_command(
        self, command: StringCommand, print_output: bool = False, print_input: bool = False, **arguments: Any
    ) -> tuple[bool, CommandOutput]:
        text = command.get_raw_value() if isinstance(command, StringCommand) else str(command)
        self.sent.setdefault(self.host.name, []).append(text)
        lines = type(self).answer(self.host.name, text)
        return True, CommandOutput([OutputLine("stdout", line) for line in lines])

    def put_file(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def get_file(self, *args: Any, **kwargs: Any) -> bool:
        return False


@contextmanager
def fresh_nodes(spec: Spec) -> Iterator[dict[str, list[str]]]:
    """Every pyinfra host of the run served by :class:`FreshConnector` (restored afterwards); the
    control-host checks of the SSH files skipped (nothing connects)."""
    import pyinfra.api.inventory as inventory

    saved = (inventory.get_execution_connectors, inventory.get_all_connectors, apply.preflight)
    saved_connector = (FreshConnector.answer, FreshConnector.sent)
    connectors = {"ssh": FreshConnector, "vagrant": FreshConnector}
    FreshConnector.answer = staticmethod(lambda host, command: fresh_answer(spec, host, command))
    FreshConnector.sent = {}
    inventory.get_execution_connectors = lambda: connectors
    inventory.get_all_connectors = lambda: connectors
    apply.preflight = lambda spec, spec_path: None
    try:
        yield FreshConnector.sent
    finally:
        inventory.get_execution_connectors, inventory.get_all_connectors, apply.preflight = saved
        FreshConnector.answer, FreshConnector.sent = saved_connector


def representatives(spec: Spec) -> list[str]:
    """One node per group: the first of its hostlist."""
    return [g.hostnames[0] for g in spec.node_groups if g.hostnames]


def fresh_plan(spec_path: str | Path, on_event: Callable[[str], None] | None = None) -> PlanResult:
    """The plan of a fresh node of each group (SpecError, as ``plan``, for a spec that does not check)."""
    spec = load_spec(spec_path)
    run = RunState(dry_run=True)
    with fresh_nodes(spec):
        result = apply.run_deploys(spec_path, limit=",".join(representatives(spec)), on_event=on_event, run=run)
    hosts = {name: shown_ops(run.planned.get(name, [])) for name in result.hosts}
    errors = {name: h.error for name, h in result.hosts.items() if h.error}
    return PlanResult(hosts, errors)

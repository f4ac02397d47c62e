"""A pyinfra connector for fresh nodes that are not there: every command succeeds with the output
its ``answer`` gives (``gpuforge.orchestrate.fresh``: a fresh node's os-release, nothing else).

Invariant: nothing leaves this process; :func:`serve_fresh` restores pyinfra's connectors on exit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from pyinfra.api import StringCommand
from pyinfra.connectors.base import BaseConnector
from pyinfra.connectors.util import CommandOutput, OutputLine

#: (host, command) -> the lines the fresh node prints.
Answer = Callable[[str, str], list[str]]


class FreshConnector(BaseConnector):
    """A pyinfra connector whose host is a fresh node; it records what it is sent."""

    handles_execution = True
    answer: ClassVar[Answer] = staticmethod(lambda host, command: [])
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
def serve_fresh(answer: Answer) -> Iterator[dict[str, list[str]]]:
    """Every pyinfra host built inside is a :class:`FreshConnector` answering with ``answer``; yields
    the commands each host was sent."""
    import pyinfra.api.inventory as inventory

    saved = (inventory.get_execution_connectors, inventory.get_all_connectors)
    saved_connector = (FreshConnector.answer, FreshConnector.sent)
    connectors = {"ssh": FreshConnector, "vagrant": FreshConnector}
    FreshConnector.answer = staticmethod(answer)
    FreshConnector.sent = {}
    inventory.get_execution_connectors = lambda: connectors
    inventory.get_all_connectors = lambda: connectors
    try:
        yield FreshConnector.sent
    finally:
        inventory.get_execution_connectors, inventory.get_all_connectors = saved
        FreshConnector.answer, FreshConnector.sent = saved_connector

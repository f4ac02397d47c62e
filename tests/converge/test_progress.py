"""Progress of a run (issue 18): events in, messages out; milestones are the lines CI logs keep."""

from __future__ import annotations

import io

from rich.console import Console

from gpuforge.deploy.layer_progress import LayerProgress
from gpuforge.progress import Milestone, status_printer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_layers_report_running_nodes_the_slowest_and_a_milestone_when_done() -> None:
    said: list[str] = []
    clock = Clock()
    p = LayerProgress(said.append, clock)
    p.op_start("base: hosts, proxy, accounts, time sync")
    for h in ("node1", "node2", "node3"):
        p.host_start(h)
    clock.now = 101.0
    p.host_end("node1", True)
    clock.now = 104.0
    p.host_end("node2", False)
    p.op_start("base: something else")  # same layer: no milestone yet
    clock.now = 109.0
    p.host_end("node3", True)
    p.op_start("slurm: packages and configs")  # next layer: base is reported
    p.host_start("node1")
    clock.now = 110.5
    p.host_end("node1", True)
    p.finish()

    assert said[:3] == [
        "base: 0/1 node(s) done, 1 running, 0 failed, 0 s; slowest node1 (0 s)",
        "base: 0/2 node(s) done, 2 running, 0 failed, 0 s; slowest node2 (0 s)",
        "base: 0/3 node(s) done, 3 running, 0 failed, 0 s; slowest node3 (0 s)",
    ]
    assert said[3] == "base: 1/3 node(s) done, 2 running, 0 failed, 1 s; slowest node3 (1 s)"
    assert said[4] == "base: 2/3 node(s) done, 1 running, 1 failed, 4 s; slowest node3 (4 s)"
    milestones = [m for m in said if isinstance(m, Milestone)]
    assert milestones == [
        "base: 2 node(s) ok, 1 failed in 9.0 s (failed: node2); slowest node3 9.0 s",
        "slurm: 1 node(s) ok, 0 failed in 1.5 s",
    ]


def test_milestones_are_printed_as_lines_and_other_messages_only_shown() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    shown: list[str] = []

    class FakeStatus:
        def update(self, message: object) -> None:
            shown.append(str(message))  # a rich Text: the message as text, never markup

    on_event = status_printer(console, FakeStatus())  # type: ignore[arg-type]
    on_event("base: 1/3 node(s) done")
    on_event(Milestone("base: 3 node(s) ok, 0 failed in 2.0 s"))
    assert shown == ["base: 1/3 node(s) done", "base: 3 node(s) ok, 0 failed in 2.0 s"]
    assert buf.getvalue() == "base: 3 node(s) ok, 0 failed in 2.0 s\n"

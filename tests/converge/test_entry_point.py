"""The ``gpuforge`` entry point patches the stdlib for gevent before pyinfra's commands only."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuforge.__main__ import PYINFRA_COMMANDS, needs_gevent_patching

#: Runs ``gpuforge.__main__.main`` with the CLI replaced by a stub that prints which stdlib
#: modules were patched by the time the CLI would start.
PROBE = """
import sys, types
stub = types.ModuleType("gpuforge.cli")
def report():
    from gevent import monkey
    print(*(monkey.is_module_patched(m) for m in ("socket", "threading", "select", "subprocess", "os", "signal")))
stub.main = report
sys.modules["gpuforge.cli"] = stub
sys.argv = ["gpuforge", *sys.argv[1:]]
from gpuforge.__main__ import main
main()
"""


CASES = [
    (["apply", "spec.yaml"], True),
    (["plan", "x"], True),
    (["check", "x"], False),
    (["validate", "x"], False),
    ([], False),
]


@pytest.mark.parametrize(("argv", "patched"), CASES)
def test_pyinfra_commands_start_with_the_stdlib_patched_and_the_others_do_not(argv: list[str], patched: bool) -> None:
    assert needs_gevent_patching(["gpuforge", *argv]) is patched
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, check=True)
    # socket, threading and select for pyinfra; never os, subprocess or signal (ansible-runner).
    assert out.stdout.split() == [str(patched)] * 3 + ["False"] * 3, out.stderr


def test_the_pyinfra_commands_exist_in_the_cli() -> None:
    from gpuforge.cli import app

    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    assert names >= PYINFRA_COMMANDS

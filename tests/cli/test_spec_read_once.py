"""One loaded cluster, passed down: ``plan`` and ``apply`` open the spec file once, where the command
starts (``gpuforge.spec.cluster``); below the command line nothing reads it again (the deploys get the
loaded spec in their host data). On simulated nodes (tests/converge/simulated.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuforge.cli import app
from tests.converge.simulated import SimulatedCluster

#: The paths being watched and the opens seen of each (the audit hook cannot be removed: it does
#: nothing while no test watches).
_WATCHED: dict[str, list[str]] = {}


def _on_audit(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or not _WATCHED or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    opened = os.path.abspath(os.fsdecode(args[0]))
    if opened in _WATCHED:
        _WATCHED[opened].append(str(args[1]))


sys.addaudithook(_on_audit)


@contextmanager
def opens_of(path: Path) -> Iterator[list[str]]:
    """Every open of ``path`` (by its name or its resolved name) while the block runs, from any thread."""
    seen: list[str] = []
    names = {os.path.abspath(path), str(path.resolve())}
    _WATCHED.update(dict.fromkeys(names, seen))
    try:
        yield seen
    finally:
        for name in names:
            _WATCHED.pop(name, None)


def test_plan_opens_the_spec_file_once(spec_file: Path, cluster: SimulatedCluster) -> None:
    with opens_of(spec_file) as seen:
        res = CliRunner().invoke(app, ["plan", str(spec_file)])
    assert res.exit_code == 0, res.output
    assert "node2" in res.output  # the nodes were planned (their facts read), yet the file was read once
    assert len(seen) == 1, seen


def test_apply_opens_the_spec_file_once(spec_file: Path, cluster: SimulatedCluster) -> None:
    """One open: the read that tells a plan file from a spec (its first bytes) goes on to read the spec."""
    with opens_of(spec_file) as seen:
        res = CliRunner().invoke(app, ["apply", str(spec_file), "--yes"])
    assert res.exit_code == 0, res.output
    assert cluster.commands  # the nodes were changed, yet the file was opened once
    assert len(seen) == 1, seen


def test_the_watch_sees_an_open(tmp_path: Path) -> None:
    """The counter itself: a read of the watched file is seen (else the tests above could not fail)."""
    path = tmp_path / "x.yaml"
    path.write_text("a: 1\n")
    with opens_of(path) as seen:
        path.read_text()
    assert len(seen) == 1


def test_validate_opens_the_spec_file_once(
    spec_file: Path, cluster: SimulatedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The validator's node reads go to this machine's own shell (its answers fail the checks: not
    the point); every node is read and checked, yet the spec file was opened once."""
    from gpuforge.validator.runner import SshTransport

    monkeypatch.setattr(SshTransport, "argv", lambda self, node: ["bash", "-c"])
    with opens_of(spec_file) as seen:
        res = CliRunner().invoke(app, ["validate", str(spec_file), "--json"])
    assert res.exit_code in (0, 1), res.output
    assert "node3" in res.output
    assert len(seen) == 1, seen


def test_accept_plan_opens_the_spec_file_once(spec_file: Path) -> None:
    with opens_of(spec_file) as seen:
        res = CliRunner().invoke(app, ["accept", str(spec_file), "--plan"])
    assert res.exit_code == 0, res.output
    assert "node2" in res.output
    assert len(seen) == 1, seen

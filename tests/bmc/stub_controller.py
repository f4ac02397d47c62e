"""A stand-in Slurm controller reached through a real shell: ``ssh``, ``sinfo`` and ``squeue`` stubs
first on PATH. ``ssh`` runs its last argument (the remote command gpuforge built) with ``sh -c``;
``sinfo``/``squeue`` log their arguments and print what the test wrote for them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

SSH = """#!/bin/sh
if [ -n "$STUB_SSH_FAIL" ]; then echo "ssh: connect to host 192.0.2.10 port 22: No route to host" >&2; exit 255; fi
for last; do :; done
exec sh -c "$last"
"""
TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$STUB_DIR/calls.log"
cat "$STUB_DIR/$(basename "$0").out"
"""


class StubController:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in (("ssh", SSH), ("sinfo", TOOL), ("squeue", TOOL)):
            (folder / name).write_text(text)
            (folder / name).chmod(0o755)
        self.set(sinfo="", squeue="")

    def set(self, sinfo: str, squeue: str = "") -> None:
        (self.folder / "sinfo.out").write_text(sinfo)
        (self.folder / "squeue.out").write_text(squeue)

    def calls(self) -> list[str]:
        log = self.folder / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def env(self, fail: bool = False) -> dict[str, str]:
        env = {**os.environ, "PATH": f"{self.folder}:{os.environ['PATH']}", "STUB_DIR": str(self.folder)}
        env.pop("STUB_SSH_FAIL", None)
        return {**env, "STUB_SSH_FAIL": "1"} if fail else env


def off_and_cycle_are_refused(
    power: Callable[..., subprocess.CompletedProcess[str]],
    spec: Path,
    ctl: StubController,
    folder: Path,
    cases: Iterable[tuple[str, str, str]],
) -> None:
    """For each (sinfo, squeue, reason) the controller answers, ``power off`` and ``power cycle`` of cpu2
    exit 2, print nothing on stdout, and say they were refused with that reason."""
    for sinfo, squeue, why in cases:
        ctl.set(sinfo=sinfo, squeue=squeue)
        for verb in ("off", "cycle"):
            done = power(verb, str(spec), "--limit", "cpu2", env=ctl.env(), folder=folder)
            assert done.returncode == 2 and done.stdout == "", done.stderr
            assert f"{verb} refused for cpu2, nothing was done" in done.stderr and why in done.stderr

"""One apply per node at a time, across spec files and control hosts.

The control host's lock (``state.apply_lock``) stops a second apply of the same spec file. A node
can still be reached from a second spec file, or from a colleague's laptop: so each apply also
holds a lock on every node it changes, for the whole run. The lock is an ``flock`` on
``/run/gpuforge/apply.lock`` held by a shell on the node that lives as long as the SSH session
that started it: the control host keeps that session's stdin open and closes it at the end. When
the control host's process dies, its SSH session ends, the shell exits and the kernel drops the
lock, so a crash never leaves a node locked (and /run is empty after a reboot).

A node whose lock is held is left out of the run with the holder named (user, host, pid, time,
spec); the other nodes converge. A node that cannot be reached is left out with the SSH reason
(a node whose sshd hung up on the session, as a busy one may, gets ``TAKE_TRIES`` tries first).
"""

from __future__ import annotations

import getpass
import os
import resource
import select
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuforge.orchestrate.remote import ssh_argv
from gpuforge.spec.cluster import Cluster

LOCK_DIR = "/run/gpuforge"
LOCK_FILE = f"{LOCK_DIR}/apply.lock"
HOLDER_FILE = f"{LOCK_DIR}/apply.holder"
HELD, BUSY = "gpuforge-lock: held", "gpuforge-lock: busy"
TAKE_TIMEOUT_S = 30.0
#: Seconds the lock command waits for a lock held by someone else before it answers BUSY.
LOCK_WAIT_S = 2
#: Tries of a lock session whose node's sshd hung up (``take``), a pause of ``RETRY_PAUSE_S``
#: times the try's number between them.
TAKE_TRIES = 3
RETRY_PAUSE_S = 1.0
#: Open files the control host holds per node during an apply: the lock session's three pipes,
#: pyinfra's SSH socket, and room for the transfers' temporary files.
FILES_PER_NODE = 8
FILES_BASE = 256


def raise_open_files_limit(nodes: int) -> int:
    """Raise this process's soft open-files limit to what ``nodes`` need (never above the hard
    limit, never lowered); return the soft limit now in force.

    Per node the run holds the lock session's three pipes and pyinfra's SSH socket: the usual soft
    limit of 1024 would run out at about 250 nodes, with EMFILE in the middle of a run.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FILES_BASE + FILES_PER_NODE * nodes
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        if new > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    return soft


def holder_text(spec_file: Path) -> str:
    """Who holds the lock: user@host, pid, UTC start time and spec file."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    user = getpass.getuser()
    return f"{user}@{socket.gethostname()} pid {os.getpid()} since {stamp} ({spec_file.name})"


def lock_command(holder: str) -> str:
    """Shell run on the node: take the lock and hold it until stdin closes.

    Prints ``HELD`` once the lock is taken, or ``BUSY <holder>`` (exit 75) when another run has it.
    It waits ``LOCK_WAIT_S`` for the lock: the health check holds it shared for the moment it reads
    the managed files (an apply holds it for its whole run, so a second apply is still refused).
    """
    h = shlex.quote(holder)
    return (
        f"mkdir -p -m 0755 {LOCK_DIR} && exec 9>>{LOCK_FILE} && "
        f"if flock -w {LOCK_WAIT_S} 9; then printf '%s\\n' {h} > {HOLDER_FILE}; echo '{HELD}'; exec cat >/dev/null; "
        f'else echo "{BUSY} $(cat {HOLDER_FILE} 2>/dev/null)"; exit 75; fi'
    )


@dataclass
class NodeLocks:
    """Locks held on nodes for one run (release them with ``release``)."""

    held: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def release(self) -> None:
        for proc in self.held.values():
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        self.held.clear()


def _first_line(proc: subprocess.Popen[bytes], deadline: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
    return proc.stdout.readline().decode("utf-8", "replace").strip() if ready else ""


def take(cluster: Cluster, names: list[str]) -> NodeLocks:
    """Take the lock on every node in ``names`` at once (one SSH session each).

    A session that the node's sshd hung up (ssh exit 255, closed or reset after it took the
    connection: ``ssh_failure_is_passing``) is tried again, up to ``TAKE_TRIES`` times in all within
    ``TAKE_TIMEOUT_S``: a busy node is not a node to leave out. A node that does not answer,
    refuses the connection, has no route, or refuses the host key or the login is left out at once.
    """
    from gpuforge.validator.runner import ssh_failure_is_passing

    locks = NodeLocks()
    raise_open_files_limit(len(names))
    command = lock_command(holder_text(cluster.path))
    deadline = time.monotonic() + TAKE_TIMEOUT_S
    pending = list(names)
    for attempt in range(1, TAKE_TRIES + 1):
        unreachable = _take_once(cluster, pending, command, deadline, locks)
        pending = [n for n, why in unreachable.items() if ssh_failure_is_passing(why)]
        if not pending or attempt == TAKE_TRIES or time.monotonic() + RETRY_PAUSE_S >= deadline:
            break
        time.sleep(RETRY_PAUSE_S * attempt)
    return locks


def _take_once(cluster: Cluster, names: list[str], command: str, deadline: float, locks: NodeLocks) -> dict[str, str]:
    """One try on ``names``: fills ``locks``; returns the nodes ssh could not reach, with ssh's stderr."""
    from gpuforge.validator.runner import NO_SECRET_KEX_OPTION, explain_ssh_failure

    started: dict[str, subprocess.Popen[bytes]] = {}
    unreachable: dict[str, str] = {}
    for name in names:
        locks.refused.pop(name, None)
        try:
            # The lock session carries no secret (a lock command and the holder's name).
            argv = ssh_argv(cluster, name, command, options=NO_SECRET_KEX_OPTION)
            started[name] = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except (OSError, RuntimeError) as exc:
            locks.refused[name] = f"cannot reach the node to take its lock: {exc}"
    for name, proc in started.items():
        line = _first_line(proc, deadline)
        if line == HELD:
            locks.held[name] = proc
            continue
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate()
        if line.startswith(BUSY):
            holder = line[len(BUSY) :].strip() or "another gpuforge run (holder unknown)"
            locks.refused[name] = f"another gpuforge apply holds this node: {holder}"
        elif proc.returncode == 255:
            unreachable[name] = err.decode("utf-8", "replace")
            locks.refused[name] = f"unreachable over SSH: {explain_ssh_failure(unreachable[name], 255)}"
        else:
            why = " ".join(err.decode("utf-8", "replace").split())[-300:] or line or "no answer in time"
            locks.refused[name] = f"could not take the node's apply lock: {why}"
    return unreachable

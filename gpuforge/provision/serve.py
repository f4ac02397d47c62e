"""The boot server in the foreground: dnsmasq on the rendered configuration and the HTTP file server
(:mod:`gpuforge.provision.http`), both children of this process, until Ctrl-C, SIGTERM or SIGHUP,
or until either child exits.

dnsmasq runs as ``dnsmasq --keep-in-foreground --conf-file=DIR/dnsmasq.conf`` with its pid file and
lease file in DIR and its log on stderr (:data:`DNSMASQ_RUN_OPTIONS`): no other configuration file
is read and the system's dnsmasq (its pid file, leases, service) is never touched. Each child runs
in a process group of its own, so a terminal's Ctrl-C reaches this process only, which stops both.

Invariants: on every way out both children are stopped (SIGTERM, SIGKILL after 5 s) and reaped;
when a child exits by itself the other is stopped and the run fails (exit 1) naming it with its
last lines of output; every line a child writes is passed on with control characters escaped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from gpuforge.progress import control_safe
from gpuforge.provision import http
from gpuforge.spec.citation import Citation

_MAN = "Debian bookworm dnsmasq-base 2.90: /usr/share/man/man8/dnsmasq.8.gz (man 8 dnsmasq)"
#: The command-line options ``--serve`` starts dnsmasq with, and what its manual says of each.
DNSMASQ_RUN_OPTIONS: dict[str, Citation] = {
    "--keep-in-foreground": Citation("dnsmasq(8), dnsmasq 2.90", _MAN,
        "-k, --keep-in-foreground: Do not go into the background at startup but otherwise run as normal."),
    "--conf-file": Citation("dnsmasq(8), dnsmasq 2.90", _MAN,
        "-C, --conf-file=<file>: Specify a configuration file. The presence of this option stops dnsmasq from "
        "reading the default configuration file (normally /etc/dnsmasq.conf)."),
    "--pid-file": Citation("dnsmasq(8), dnsmasq 2.90", _MAN,
        "-x, --pid-file=<path>: Specify an alternate path for dnsmasq to record its process-id in. Normally "
        "/var/run/dnsmasq.pid."),
    "--dhcp-leasefile": Citation("dnsmasq(8), dnsmasq 2.90", _MAN,
        "-l, --dhcp-leasefile=<path>: Use the specified file to store DHCP lease information."),
    "--log-facility": Citation("dnsmasq(8), dnsmasq 2.90", _MAN,
        "-8, --log-facility=<facility>: [...] If the facility is '-' then dnsmasq logs to stderr."),
}  # fmt: skip
#: The last line dnsmasq 2.90 logs when it has started with TFTP on (read from its log, as the
#: namespace test's fixture does): the DHCP sockets are bound by then.
DNSMASQ_READY = "TFTP root is"
READY_SECONDS = 10.0
STOP_SECONDS = 5.0
TAIL_LINES = 12
#: The signals that stop the server (SIGHUP: the terminal went away).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The folder holding this ``gpuforge`` package: the HTTP child imports it from there.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class Child:
    """A started child: its process, the last lines of its output, set ``ready`` once it logged
    ``marker`` (at once when there is none)."""

    name: str
    proc: subprocess.Popen[bytes]
    marker: str | None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    ready: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    def read(self) -> None:
        """Pass each line of the child's stderr on (escaped, prefixed), keep the last ones."""
        assert self.proc.stderr is not None
        if self.marker is None:
            self.ready.set()
        for raw in self.proc.stderr:
            line = control_safe(raw.decode(errors="replace").rstrip("\r\n"))
            self.tail.append(line)
            print(f"[{self.name}] {line}", file=sys.stderr, flush=True)
            if self.marker is not None and self.marker in line:
                self.ready.set()

    def died(self) -> str:
        """Why the run failed: this child exited with its status and its last lines."""
        code = self.proc.returncode
        how = f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited {code}"
        lines = "\n".join(f"  {line}" for line in self.tail) or "  (no output)"
        return f"{self.name} (pid {self.proc.pid}) {how}; its last output:\n{lines}"


def dnsmasq_argv(dnsmasq: str, folder: Path) -> list[str]:
    """dnsmasq on ``folder``'s rendered configuration, its pid and lease files there, logging to stderr."""
    return [dnsmasq, "--keep-in-foreground", f"--conf-file={folder / 'dnsmasq.conf'}",
            f"--pid-file={folder / 'dnsmasq.pid'}", f"--dhcp-leasefile={folder / 'dnsmasq.leases'}",
            "--log-facility=-"]  # fmt: skip


def start(name: str, argv: list[str], marker: str | None, stdin: bytes | None = None,
          pass_fds: tuple[int, ...] = ()) -> Child:  # fmt: skip
    """Start a child in a process group of its own (``stdin`` written to it, then closed)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=pass_fds,
                            process_group=0)  # fmt: skip
    if stdin is not None:
        assert proc.stdin is not None
        with proc.stdin:
            proc.stdin.write(stdin)
    child = Child(name, proc, marker)
    child.reader = threading.Thread(target=child.read, name=f"{name}-output", daemon=True)
    child.reader.start()
    return child


def http_argv(listener_fd: int) -> list[str]:
    """How the HTTP child is started: on the listening socket ``listener_fd``, dying with this process."""
    return [sys.executable, "-I", "-c", http.CHILD_CODE, PACKAGE_ROOT, str(listener_fd), str(os.getpid())]


def http_table(routes: dict[str, Path]) -> bytes:
    """The URL -> file map as the HTTP child reads it on stdin."""
    return json.dumps({url: str(path) for url, path in routes.items()}).encode()


def http_child(listener_fd: int, routes: dict[str, Path]) -> Child:
    """The HTTP file server on the listening socket ``listener_fd``, serving ``routes``."""
    return start("http", http_argv(listener_fd), None, stdin=http_table(routes), pass_fds=(listener_fd,))


def stop(children: list[Child]) -> None:
    """SIGTERM each child still running, SIGKILL after :data:`STOP_SECONDS`; reap all."""
    for child in children:
        if child.proc.poll() is None:
            child.proc.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for child in children:
        try:
            child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()
        if child.reader is not None:
            child.reader.join(timeout=2)


def exited(children: list[Child]) -> str | None:
    """Why the run failed, when a child has exited (its reader drained first); else None."""
    dead = next((c for c in children if c.proc.poll() is not None), None)
    if dead is None:
        return None
    if dead.reader is not None:
        dead.reader.join(timeout=2)
    return dead.died()


def wait_ready(children: list[Child], stopping: threading.Event) -> str | None:
    """Until every child is ready or a stop signal came (None); else why not (a child exited, the
    time ran out)."""
    deadline = time.monotonic() + READY_SECONDS
    while not stopping.is_set() and not all(c.ready.is_set() for c in children):
        if (why := exited(children)) is not None:
            return why
        if time.monotonic() > deadline:
            late = [c.name for c in children if not c.ready.is_set()]
            return f"{', '.join(late)} did not report ready within {READY_SECONDS:.0f} s"
        time.sleep(0.05)
    return None


def supervise(children: list[Child], stopping: threading.Event) -> str | None:
    """Until a stop signal (None) or a child exits by itself (why the run failed)."""
    while not stopping.wait(0.2):
        if (why := exited(children)) is not None:
            return why
    return None


def run(dnsmasq: str, folder: Path, listener: socket.socket, routes: dict[str, Path], interface: str) -> int:
    """Serve until a stop signal (0) or a child's exit (1, named on stderr); both children stopped
    and reaped on the way out. ``listener``: the HTTP server's bound socket (handed to its child)."""
    children: list[Child] = []
    address, port = listener.getsockname()[:2]
    why: str | None = None
    with stop_signals() as stopping:
        try:
            with listener:
                children.append(http_child(listener.fileno(), routes))
            children.append(start("dnsmasq", dnsmasq_argv(dnsmasq, folder), DNSMASQ_READY))
            why = wait_ready(children, stopping)
            if why is None and not stopping.is_set():
                http, dns = children
                print(f"serving: dnsmasq pid {dns.proc.pid} on {interface}, HTTP http://{address}:{port} "
                      f"pid {http.proc.pid} ({len(routes)} files), folder {folder}; Ctrl-C or SIGTERM stops",
                      flush=True)  # fmt: skip
                why = supervise(children, stopping)
        finally:
            stop(children)
    if why is not None:
        print(f"gpuforge provision: {why}", file=sys.stderr, flush=True)
        return 1
    print("stopped: dnsmasq and the HTTP server have exited", flush=True)
    return 0


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT, SIGTERM or SIGHUP while the block runs (the old handlers back after)."""
    stopping = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield stopping
    finally:
        for s, h in old.items():
            signal.signal(s, h)

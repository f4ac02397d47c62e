"""``gpuforge provision SPEC --serve`` as a process inside the server's network namespace, for the
serve test: its output read as it comes, the pids it names, and what is left after it.

The serve command prints one line when both children are up::

    serving: dnsmasq pid 123 on gfs..., HTTP http://10.99.0.1:8080 pid 456 (6 files), folder /x; ...
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.provision import netns

SERVING = re.compile(r"serving: dnsmasq pid (\d+) on \S+, HTTP (\S+) pid (\d+) \((\d+) files\), folder (\S+);")


@dataclass
class Serve:
    """The running serve command: its process, its stdout lines as they come, all its stderr."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    dnsmasq_pid: int = 0
    http_pid: int = 0
    url: str = ""
    files: int = 0
    folder: Path = Path()
    readers: list[threading.Thread] = field(default_factory=list)

    def wait_serving(self, timeout: float = 15.0) -> None:
        """Until the serving line (its pids and folder kept); an error with the output otherwise."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no serving line within {timeout} s: {self.output()}") from None
        found = SERVING.match(line)
        assert found, f"not the serving line: {line!r}; {self.output()}"
        self.dnsmasq_pid, self.url, self.http_pid = int(found[1]), found[2], int(found[3])
        self.files, self.folder = int(found[4]), Path(found[5])

    def finish(self, timeout: float = 10.0) -> int:
        """The exit status, once the command and its output readers are done."""
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=5)
        return code

    def output(self) -> str:
        return "stdout:\n" + "".join(self.stdout) + "stderr:\n" + "".join(self.stderr)


def _pump(stream: object, into: list[str], lines: queue.Queue[str] | None) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.append(line)
        if lines is not None:
            lines.put(line)


def start(net: netns.BootNetwork, spec: Path, *args: str) -> Serve:
    """``gpuforge provision SPEC --serve ARGS`` in the server's namespace (this checkout's gpuforge)."""
    argv = ["ip", "netns", "exec", net.server_ns, sys.executable, "-m", "gpuforge", "provision", str(spec), "--serve",
            *args]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=netns.ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    serve = Serve(proc)
    for stream, into, lines in ((proc.stdout, serve.stdout, serve.lines), (proc.stderr, serve.stderr, None)):
        reader = threading.Thread(target=_pump, args=(stream, into, lines), daemon=True)
        reader.start()
        serve.readers.append(reader)
    return serve


def stop(serve: Serve) -> None:
    """Kill the command if a failed test left it running (its children are its own to stop)."""
    if serve.proc.poll() is None:
        serve.proc.terminate()
        try:
            serve.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            serve.proc.kill()
            serve.proc.wait(timeout=5)
    for pid in (serve.dnsmasq_pid, serve.http_pid):
        if pid and alive(pid):
            os.kill(pid, 9)


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (a reaped child does not; a zombie would)."""
    return Path(f"/proc/{pid}").exists()


def fetch(net: netns.BootNetwork, host: str, port: int, *paths: str, method: str = "GET") -> list[dict[str, object]]:
    """Each path as the stdlib HTTP client in the node's namespace got it."""
    argv = ["ip", "netns", "exec", net.client_ns, sys.executable, "-m", "tests.provision.http_client", host,
            str(port), "--method", method, *paths]  # fmt: skip
    out = subprocess.run(argv, cwd=netns.ROOT, capture_output=True, text=True, timeout=30, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def listening(net: netns.BootNetwork) -> str:
    """Every TCP and UDP socket listening in the server's namespace (``ss``), one per line."""
    argv = ["ip", "netns", "exec", net.server_ns, "ss", "-H", "-l", "-n", "-t", "-u"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip()

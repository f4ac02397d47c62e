"""The boot server's HTTP side: a fixed map of URL paths to files, and nothing else.

:func:`main` (``gpuforge provision --serve`` runs it as a child, see :data:`CHILD_CODE`) serves on
the listening socket whose descriptor it is given (bound by the parent, so a port in use is found
before anything starts) the map it reads as JSON from stdin (``{"/ipxe/cpu1.ipxe": "/abs/path"}``).
It asks the kernel for SIGTERM when its parent dies (:data:`PDEATHSIG`), so even a SIGKILL of
gpuforge does not leave it holding the port.

Invariants: a request is answered from the map by its exact path (no decoding, no normalising, no
query string): a path not in it, ``..`` and folders included, is 404, so no file outside the map can
be named; only GET is answered (iPXE's ``kernel`` and ``initrd`` send nothing else, and no Range:
:data:`gpuforge.spec.pxe_facts.IPXE_HTTP`; HEAD and the rest get the standard library's 501), as
HTTP/1.0 with the file's Content-Length, then the connection is closed. Log lines go to stderr with
control characters escaped (a request line is the client's text).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuforge.progress import control_safe
from gpuforge.spec.citation import Citation

#: ``prctl(PR_SET_PDEATHSIG, sig)``: the option's number and what the manual says of it.
PR_SET_PDEATHSIG = 1
PDEATHSIG = (
    Citation("Linux include/linux/prctl.h", "https://elixir.bootlin.com/linux/2.2.13pre17/source/include/linux/prctl.h",
             "#define PR_SET_PDEATHSIG 1 /* Second arg is a signal */"),
    Citation("PR_SET_PDEATHSIG(2const), Linux man-pages 6.10",
             "https://man7.org/linux/man-pages/man2/pr_set_pdeathsig.2const.html",
             "Set the parent-death signal of the calling process to sig [...] This is the signal that the calling "
             "process will get when its parent dies. The parent-death signal is sent upon subsequent termination of "
             "the parent thread [...] If the parent thread and all ancestor subreapers have already terminated by "
             "the time of the PR_SET_PDEATHSIG operation, then no parent-death signal is sent to the caller."),
)  # fmt: skip
#: How the parent starts :func:`main`: ``python -I -c CHILD_CODE ROOT FD PARENT_PID``, ROOT the folder
#: that holds the parent's own ``gpuforge`` package (``-I``: no folder of the working directory or of
#: PYTHON* variables on the path; the child runs the parent's code, not a ``gpuforge`` found there).
CHILD_CODE = "import sys; sys.path.insert(0, sys.argv[1]); from gpuforge.provision.http import main; main(sys.argv[2:])"

#: The Content-Type of a served file, by its suffix (iPXE knows a script by its ``#!ipxe`` line: IPXE_COMMANDS).
CONTENT_TYPES = {".ipxe": "text/plain; charset=utf-8"}
CHUNK = 1 << 20


def handler_for(routes: Mapping[str, Path]) -> type[BaseHTTPRequestHandler]:
    """A request handler class answering GET from ``routes`` (URL path -> file) and 404 otherwise."""
    table = dict(routes)

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuforge-provision"
        sys_version = ""

        def do_GET(self) -> None:
            # the request line's own target: ``self.path`` has a leading '//' folded into '/' already
            words = self.requestline.split()
            path = table.get(words[1]) if len(words) == 3 else None
            if path is None:
                self.send_error(404)
                return
            try:
                f = path.open("rb")
            except OSError as e:
                self.log_error("cannot open %s: %s", str(path), e.strerror or str(e))
                self.send_error(404)
                return
            with f:
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPES.get(path.suffix, "application/octet-stream"))
                self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
                self.end_headers()
                shutil.copyfileobj(f, self.wfile, CHUNK)

        def log_message(self, format: str, *args: Any) -> None:
            line = f"{self.address_string()} {format % args}"
            print(control_safe(line.replace("\n", "\\n")), file=sys.stderr, flush=True)

    return Handler


def server_on(sock: socket.socket, routes: Mapping[str, Path]) -> ThreadingHTTPServer:
    """A threading HTTP server on the already listening ``sock``, answering from ``routes``."""
    server = ThreadingHTTPServer(sock.getsockname()[:2], handler_for(routes), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    return server


def listening(address: str, port: int) -> socket.socket:
    """A TCP socket bound to ``address``:``port`` and listening (OSError when it cannot be)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(64)
    except OSError:
        sock.close()
        raise
    return sock


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process when the parent thread ``parent`` ends (at once if it already has)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> None:
    """Serve the map on stdin from the listening socket ``argv[0]`` (a descriptor), until killed or
    until the parent ``argv[1]`` (a pid) ends."""
    die_with_parent(int(argv[1]))
    routes = {url: Path(path) for url, path in json.load(sys.stdin).items()}
    sock = socket.socket(fileno=int(argv[0]))
    server = server_on(sock, routes)
    print(f"serving {len(routes)} files on {sock.getsockname()[0]}:{sock.getsockname()[1]}", file=sys.stderr)
    server.serve_forever()

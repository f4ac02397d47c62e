"""Reading an input file gpuforge is handed: only a regular file, and no more of it than its limit.

The type and size are checked on the opened file before a byte is read, so ``/dev/zero``, a FIFO
(opened without waiting for a writer), a directory or a huge file cost one ``fstat``.

What a node prints is read the same way: bounded in size (:func:`run_bounded`, :func:`inflate`)
and in parse cost (:func:`bounded_json`, :data:`NODE_NUMBER_DIGITS`); past a limit it is a
:class:`NodeOutputError` for that node, never a crash of the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import threading
import zlib
from pathlib import Path
from typing import IO, Any

from gpuforge.spec.limits import Limit


class InputFileError(Exception):
    """An input file that was not read: ``why`` says what it is or which limit it is over."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


def read_regular_file(path: str | Path, limit: Limit, *, follow_links: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit.value`` of them (else InputFileError).

    ``follow_links=False`` also refuses a symbolic link (``O_NOFOLLOW``).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise InputFileError(f"cannot read it: {e.strerror or e}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit.value:
        os.close(fd)
        if st.st_size > limit.value and stat.S_ISREG(st.st_mode):
            raise InputFileError(limit.refusal(st.st_size))
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a device, FIFO or socket"
        raise InputFileError(f"refused: {kind}, not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit.value + 1)
        except OSError as e:
            raise InputFileError(f"cannot read it: {e.strerror or e}") from None
    if len(data) > limit.value:  # it grew since fstat
        raise InputFileError(limit.refusal())
    return data


# --------------------------------------------------------------------------- what nodes print

#: Bytes kept of one stream (stdout or stderr) of a command run on a node: the largest honest
#: answer (a validate round trip of every managed file's text, an acceptance job's output) is a few MiB.
NODE_OUTPUT_BYTES = 64 * 2**20
#: Bytes an acceptance report may expand to once decompressed (its output tails are 256 KiB each).
REPORT_BYTES = 16 * 2**20
#: Digits of one number read from a node's output (Python's ``int()`` refuses past 4,300 digits).
NODE_NUMBER_DIGITS = 18


class NodeOutputError(ValueError):
    """A node's output over a limit, or unreadable: an error for that node, never for the run."""


def _drain(
    stream: IO[bytes], keep: list[bytes], limit: int, over: threading.Event, proc: subprocess.Popen[bytes]
) -> None:
    """Read ``stream`` to its end, keeping at most ``limit`` bytes; past it, flag and kill ``proc``."""
    size = 0
    for chunk in iter(lambda: stream.read(1 << 16), b""):
        if size + len(chunk) > limit:
            keep.append(chunk[: limit - size])
            over.set()
            with contextlib.suppress(OSError):
                proc.kill()
            break
        keep.append(chunk)
        size += len(chunk)
    stream.close()


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):
        stream.write(data)
    with contextlib.suppress(OSError):
        stream.close()


def run_bounded(
    argv: list[str], data: bytes = b"", timeout: float = 120, limit: int = NODE_OUTPUT_BYTES
) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(argv, input=data, capture_output=True, timeout=timeout)`` keeping at most
    ``limit`` bytes of each stream: a command printing more is killed and NodeOutputError raised,
    so a node can never make the control host hold more than ``2 * limit`` bytes of its output.
    Raises subprocess.TimeoutExpired (the command killed) and OSError as subprocess.run does."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[bytes] = []
    err: list[bytes] = []
    over = threading.Event()
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True),
        threading.Thread(target=_drain, args=(proc.stdout, out, limit, over, proc), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err, limit, over, proc), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in threads:
            t.join(5)
    if over.is_set():
        raise NodeOutputError(f"the command printed more than {limit:,} bytes: cut there and refused")
    return subprocess.CompletedProcess(argv, rc, b"".join(out), b"".join(err))


def inflate(data: bytes, limit: int = REPORT_BYTES) -> bytes:
    """zlib-decompressed ``data``, refused (NodeOutputError) once it would pass ``limit`` bytes:
    a few MB of a node's output never becomes gigabytes on the control host."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise NodeOutputError(f"not zlib data: {e}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise NodeOutputError(f"expands past {limit:,} bytes: refused")
    return out


def bounded_json(text: str | bytes) -> Any:
    """``json.loads`` that raises only NodeOutputError: deep nesting (RecursionError) and numbers
    past Python's digit limit included."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise NodeOutputError(f"not readable JSON: {str(e)[:200]}") from None

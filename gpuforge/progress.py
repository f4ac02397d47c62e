"""Progress messages of long runs (apply, validate, bundle), for a person or a CI log.

A run reports through one ``on_event(message)`` callable. Most messages are transient (what is
running now: a terminal shows the latest one in place); a :class:`Milestone` is a line worth
keeping (a layer finished on every node, a node validated), which the CLI prints as a plain line
also when the output is not a terminal, so CI logs read well. A ``Milestone`` is a ``str``: code
that only passes messages on needs no change.

:func:`configure_logging` is ``-v`` and ``--log-file``: pyinfra's log and gpuforge's (every
progress message, on the ``gpuforge.progress`` logger) to stderr or a private file, redacted.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.status import Status
from rich.text import Text


class Milestone(str):
    """A progress message to keep as a line of the log."""

    __slots__ = ()


#: C0/C1 control characters but tab and newline: what a terminal would act on (cursor moves, OSC 52).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def control_safe(text: str) -> str:
    """``text`` with control characters written as ``\\xNN`` (what came from a node may hold any)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def status_printer(console: Console, status: Status) -> Callable[[str], None]:
    """An ``on_event`` for the CLI: every message in the status line (terminals), and each
    :class:`Milestone` also printed as a plain line (kept in CI logs)."""

    def on_event(message: str) -> None:
        safe = Text(control_safe(message))  # messages quote node text: never markup, never an escape sequence
        if isinstance(message, Milestone):
            progress_log.info("%s", message)
            console.print(safe, highlight=False)
        else:
            progress_log.debug("%s", message)
        status.update(safe)

    return on_event


# ---------------------------------------------------------------------------- logging (-v, --log-file)

#: Help of the ``-v``/``--verbose`` option of plan, apply and validate.
VERBOSE_HELP = (
    "Log to stderr (repeat for more): -v each operation's result per node, -vv the commands run on the "
    "nodes and the facts read, -vvv the SSH connections too"
)
#: Help of the ``--log-file`` option of plan, apply and validate.
LOG_FILE_HELP = (
    "Append the whole debug log (progress, operations, commands) to this file, created 0600, "
    "credentials in URLs hidden; independent of -v"
)
#: Loggers a run writes to: gpuforge's own (``gpuforge.progress``: every progress message) and pyinfra's.
RUN_LOGGERS = ("gpuforge", "pyinfra")
#: What SSH adds at -vvv (and to the log file then).
SSH_LOGGERS = ("paramiko",)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: A password or passphrase in a logged dict (pyinfra logs its SSH connection arguments at debug).
_SECRET_ARGS = re.compile(r"""(['"][\w-]*(?:password|passphrase|secret|token)['"]\s*:\s*)(['"]).*?\2""", re.IGNORECASE)
_configured = False
progress_log = logging.getLogger("gpuforge.progress")


class _Redacting(logging.Filter):
    """Hide credentials (``redact``: URLs; passwords in logged arguments) and terminal colours in
    every record, before any handler formats it."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        text = control_safe(_SECRET_ARGS.sub(r"\1'<redacted>'", _ANSI.sub("", record.getMessage())))
        record.msg, record.args = self.redact(text), None
        return True


class _Stderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a record comes (rich's live status line redirects it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        del value


def open_log_file(path: Path) -> IO[str]:
    """``path`` opened for appending, created 0600 (an existing file is made 0600 too)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def configure_logging(verbosity: int, log_file: Path | None, redact: Callable[[str], str]) -> None:
    """Send the run's logs to stderr (``verbosity`` 1: info, 2+: debug; 3+: SSH too) and/or to
    ``log_file`` (everything at debug), each record through ``redact``. Nothing when neither is
    asked for: pyinfra stays silent (:func:`logging_configured`). Raises OSError for a log file
    that cannot be opened."""
    global _configured
    if verbosity <= 0 and log_file is None:
        return
    handlers: list[logging.Handler] = []
    if verbosity > 0:
        stderr = _Stderr()
        stderr.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
        stderr.addFilter(lambda r: not r.name.startswith(progress_log.name))  # the status line shows these
        stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        handlers.append(stderr)
    if log_file is not None:
        to_file = logging.StreamHandler(open_log_file(log_file))
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(to_file)
    for handler in handlers:
        handler.addFilter(_Redacting(redact))
    names = RUN_LOGGERS + (SSH_LOGGERS if verbosity >= 3 else ())
    for name in names:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        for handler in handlers:
            logger.addHandler(handler)
    _configured = True


def logging_configured() -> bool:
    """Whether :func:`configure_logging` set up a destination (else runs keep pyinfra quiet)."""
    return _configured

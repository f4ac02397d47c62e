"""The consoles every command prints through: full width and plain when not a terminal, no emoji codes.

Invariants: output through a pipe, a file or a CI log is never cut or wrapped at 80 columns (Rich's
default when it cannot ask a terminal): it gets ``PIPE_WIDTH`` columns unless ``COLUMNS`` says
otherwise; ``:name:`` in a path or message stays as written (Rich would turn ``:100:`` into an emoji);
text is soft-wrapped (a long line stays one line).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

#: Columns when the stream is not a terminal: wide enough for any table gpuforge prints.
PIPE_WIDTH = 1000


def _is_terminal(stderr: bool) -> bool:
    stream = sys.stderr if stderr else sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) following the module's invariants."""
    width = None if _is_terminal(stderr) or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(stderr=stderr, soft_wrap=True, emoji=False, width=width)


def help_settings() -> dict[str, int | None]:
    """Click context settings for ``--help``: wrapped at the terminal's width on a terminal, never
    wrapped through a pipe (``PIPE_WIDTH``; the reader's pager or terminal wraps)."""
    width = None if _is_terminal(False) or os.environ.get("COLUMNS") else PIPE_WIDTH
    return {"terminal_width": width, "max_content_width": PIPE_WIDTH}

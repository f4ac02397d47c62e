"""Review item 7: progress lines quote node text (Ansible task names, errors): printed as text."""

from __future__ import annotations

import io

from rich.console import Console
from rich.status import Status

from gpuforge.progress import Milestone, status_printer


def test_progress_lines_print_node_text_without_markup_or_escapes() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=300)
    status = Status("", console=console)
    say = status_printer(console, status)
    hostile = "ansible site: node1: [/x] \x1b]52;c;AAAA\x07 ok"
    say(hostile)  # Rich's markup would raise MarkupError on "[/x]"
    say(Milestone(hostile))
    text = buf.getvalue()
    assert "[/x] \\x1b]52;c;AAAA\\x07 ok" in text and "\x1b]52" not in text

"""Command blocks of the documentation, as the doc tests run them.

A fenced block whose info string is ``sh doctest`` (runs anywhere: it touches no host) or
``sh doctest-lab`` (runs against the lab) holds commands and what they print:

- a line ``$ COMMAND`` is a command; ``# exit N`` at its end says the exit status it must have
  (0 otherwise). A command with a here-document (``<<'EOF'``) takes the lines up to the
  terminator with it.
- every other non-empty line is expected output of the command above it: it must appear in what
  the command printed (stdout and stderr), in that order.

Blocks are plain text: the runner reads them with this parser, the reader as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```(?P<info>[^`]*)$")
EXIT = re.compile(r"\s+#\s*exit\s+(?P<code>\d+)\s*$")
HEREDOC = re.compile(r"<<-?\s*'?(?P<word>[A-Za-z_]+)'?")


@dataclass
class Command:
    text: str
    exit_code: int = 0
    expect: list[str] = field(default_factory=list)


@dataclass
class Block:
    path: Path
    line: int
    kind: str  # "doctest" or "doctest-lab"
    commands: list[Command]

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"


def _commands(lines: list[str]) -> list[Command]:
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("$ "):
            text = line[2:]
            code = 0
            m = EXIT.search(text)
            if m:
                code, text = int(m["code"]), text[: m.start()]
            doc = HEREDOC.search(text)
            if doc:
                body = []
                while i < len(lines) and lines[i] != doc["word"]:
                    body.append(lines[i])
                    i += 1
                text = "\n".join([text, *body, doc["word"]])
                i += 1
            commands.append(Command(text, code))
        elif line.strip():
            if not commands:
                raise ValueError(f"expected output before any command: {line!r}")
            commands[-1].expect.append(line.strip())
    return commands


def read_blocks(path: Path) -> list[Block]:
    """The ``sh doctest`` / ``sh doctest-lab`` blocks of a Markdown file."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        i += 1
        if not m:
            continue
        info = m["info"].split()
        start, body = i, []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if info[:1] == ["sh"] and len(info) > 1 and info[1] in ("doctest", "doctest-lab"):
            blocks.append(Block(path, start, info[1], _commands(body)))
    return blocks

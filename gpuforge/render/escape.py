"""One escaping helper per syntax a spec value lands in.

The spec's types (``gpuforge.spec.types``) already refuse what cannot be one token in its
place; these helpers are the second wall, at the sink: each writes a value so that its format's
own parser reads back exactly that value, as one token, in the place it was written, or raises
``ValueError`` for a value its format cannot carry at all (a NUL in a shell word, a quote in an
apt.conf string). A value that needs no quoting is written as it is, so rendered bytes of
ordinary specs do not change. YAML, JSON and TOML go through their writers, never through these.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

#: Characters no line-based config format here can carry inside a value (C0, DEL, NEL, LS, PS).
_LINE_BREAKERS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
#: Characters systemd reads literally in an ExecStart word (everything else is quoted).
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


def _one_line(value: str, where: str) -> str:
    bad = _LINE_BREAKERS.search(value)
    if bad is not None:
        raise ValueError(f"{value!r} holds {bad.group()!r}, which {where} cannot carry")
    return value


def shell_word(value: str) -> str:
    """``value`` as one POSIX shell word (``shlex.quote``); no NUL (no shell argument holds one)."""
    if "\x00" in value:
        raise ValueError(f"{value!r} holds a NUL byte, which no shell argument can carry")
    return shlex.quote(value)


def shell_join(argv: Iterable[str]) -> str:
    """A command line whose words are exactly ``argv``."""
    return " ".join(shell_word(a) for a in argv)


def apt_conf_string(value: str) -> str:
    """``value`` as an apt.conf string (``"..."``): apt has no escape inside quotes, so a value with
    a quote or a line break is refused (``apt-config dump`` reads back exactly ``value``)."""
    _one_line(value, "an apt.conf string")
    if '"' in value:
        raise ValueError(f"{value!r} holds '\"', which an apt.conf string cannot carry")
    return f'"{value}"'


def slurm_conf_value(value: str) -> str:
    """``value`` as a slurm.conf value: as it is, or in double quotes when it holds a space.

    Slurm's parser (``src/common/parse_config.c``) strips ``#`` comments and ``\\`` escapes before
    it splits ``Key=Value`` pairs, whose values are ``"..."`` (no quote inside) or one run of
    non-space characters; a value that cannot be written so is refused.
    """
    _one_line(value, "a slurm.conf value")
    if not value or any(c in value for c in '#"\\'):
        raise ValueError(f"{value!r}: a slurm.conf value is not empty and holds no '#', '\"' or '\\\\'")
    return f'"{value}"' if " " in value else value


def systemd_word(value: str, quoted: bool = False) -> str:
    """``value`` as one word of a systemd ``ExecStart=`` or ``Environment=`` line (systemd.service
    "Command lines", systemd.exec "Environment="): plain when it is and ``quoted`` is not asked for,
    else double-quoted with ``\\`` and ``"`` escaped; ``%`` (specifiers) and ``$`` (variable
    expansion) doubled either way."""
    _one_line(value, "a systemd unit line")
    text = value.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN.fullmatch(value) and not quoted:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_exec(argv: Iterable[str]) -> str:
    """An ``ExecStart=`` command line that systemd splits into exactly ``argv``."""
    return " ".join(systemd_word(a) for a in argv)


def sed_replacement(value: str, delimiter: str = "#") -> str:
    """``value`` as the literal replacement of a sed ``s`` command using ``delimiter``:
    ``\\``, ``&`` and the delimiter escaped; no line break (it would end the command)."""
    _one_line(value, "a sed replacement")
    return re.sub(r"([\\&" + re.escape(delimiter) + "])", r"\\\1", value)


def promql_string(value: str) -> str:
    """``value`` as a PromQL double-quoted string literal (Go escapes: ``\\`` and ``"``)."""
    _one_line(value, "a PromQL string")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

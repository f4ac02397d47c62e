"""Shared helpers of the node readings: shell guards, status markers and small parsers.

Every reading's command that depends on an optional binary is wrapped so that it

* prints ``__missing=<binary>`` instead of failing when the binary is absent, and
* appends ``__rc=<exit code>`` after the real command (whose stderr is merged into stdout).

The wrapper itself always exits 0, so pyinfra never treats a missing tool or a failing
``nvidia-smi`` as a fact error, and a parser always receives at least one line and can
report *why* nothing useful came back. The node program adds two markers of its own:
``__timeout=<seconds>`` (the command ran past its time) and ``__error=<why>`` (an in-process
reader failed).
"""

from __future__ import annotations

import csv
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

RC_MARKER = "__rc="
MISSING_MARKER = "__missing="
TIMEOUT_MARKER = "__timeout="
ERROR_MARKER = "__error="

_MARKER_RE = re.compile(r"^__(?P<key>[a-z0-9_]+)=(?P<value>.*)$")


def guarded(binary: str, body: str) -> str:
    """Run ``body`` (stderr merged) only if ``binary`` exists; always exit 0.

    Output ends with ``__rc=<exit status of body>``, or is ``__missing=<binary>``.
    """
    return (
        f"if command -v {binary} >/dev/null 2>&1; "
        f'then {body} 2>&1; echo "{RC_MARKER}$?"; '
        f'else echo "{MISSING_MARKER}{binary}"; fi'
    )


@dataclass
class CommandOutput:
    """Output of a :func:`guarded` command split into data lines and markers."""

    lines: list[str] = field(default_factory=list)
    rc: int | None = None
    missing: str | None = None
    timeout: str | None = None
    """Seconds the command was given before the node program stopped it (None: it finished)."""
    error: str | None = None
    """Why an in-process reader could not read (None: it could)."""

    @property
    def available(self) -> bool:
        return self.missing is None

    @property
    def ok(self) -> bool:
        """It ran to the end and exited 0 (or printed no status)."""
        return self.missing is None and self.timeout is None and self.error is None and self.rc in (0, None)

    def last_line(self) -> str:
        """The last non-blank data line (where tools print why they failed), or ''."""
        return next((line.strip() for line in reversed(self.lines) if line.strip()), "")


def split_guarded(output: Iterable[str]) -> CommandOutput:
    """Separate the ``__rc=``, ``__missing=``, ``__timeout=`` and ``__error=`` markers from the data lines."""
    result = CommandOutput()
    for line in output:
        if line.startswith(RC_MARKER):
            result.rc = to_int(line[len(RC_MARKER) :])
        elif line.startswith(MISSING_MARKER):
            result.missing = line[len(MISSING_MARKER) :].strip() or "unknown"
        elif line.startswith(TIMEOUT_MARKER):
            result.timeout = line[len(TIMEOUT_MARKER) :].strip() or "?"
        elif line.startswith(ERROR_MARKER):
            result.error = line[len(ERROR_MARKER) :].strip() or "unknown error"
        else:
            result.lines.append(line)
    return result


def parse_marker(line: str) -> tuple[str, str] | None:
    """Return ``(key, value)`` for a ``__key=value`` marker line, else None."""
    match = _MARKER_RE.match(line)
    if match is None:
        return None
    return match.group("key"), match.group("value")


def to_int(value: str | None) -> int | None:
    """Parse an integer, returning None for empty/``N/A``/garbage values."""
    if value is None:
        return None
    value = value.strip()
    try:
        return int(value)
    except ValueError:
        return None


_NA_VALUES = frozenset({"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]"})


def na_to_none(value: str | None) -> str | None:
    """Map nvidia-smi style placeholders (``[N/A]``, ``[Not Supported]``) to None."""
    if value is None:
        return None
    value = value.strip()
    if value.lower() in _NA_VALUES:
        return None
    return value


def yes_no(value: str | None) -> bool | None:
    """Parse Yes/No/Enabled/Disabled/True/False/1/0 into a bool (None when unknown)."""
    value = na_to_none(value)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in {"yes", "enabled", "true", "on", "1"}:
        return True
    if lowered in {"no", "disabled", "false", "off", "0"}:
        return False
    return None


def normalize_pci_address(address: str) -> str:
    """Normalise a PCI address to ``dddd:bb:dd.f`` lower case.

    Accepts nvidia-smi's 8-digit domain (``00000000:18:00.0``), lspci's ``0000:18:00.0``,
    domain-less ``18:00.0`` and the kernel-log form without function (``0000:18:00``).
    """
    address = address.strip().lower()
    parts = address.split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) == 3:
        domain = parts[0][-4:].rjust(4, "0")
        return f"{domain}:{parts[1]}:{parts[2]}"
    return address


def split_csv(line: str) -> list[str]:
    """Split one CSV line (nvidia-smi ``--format=csv``) into stripped cells; [] if unparsable."""
    try:
        row = next(csv.reader([line.replace("\r", " ").replace("\n", " ")], skipinitialspace=True), [])
    except csv.Error:
        return []
    return [cell.strip() for cell in row]


def quote_all(values: Sequence[str]) -> str:
    """Shell-quote and space-join ``values``."""
    return " ".join(shlex.quote(value) for value in values)


def as_list(values: Sequence[str] | str) -> list[str]:
    """A list of strings; a single string is split on commas (``pyinfra ... fact X packages=a,b``).

    Never iterates a string character by character.
    """
    if isinstance(values, str):
        return [value.strip() for value in values.split(",") if value.strip()]
    return list(values)


def as_bool(value: bool | str) -> bool:
    """Bool from a bool or a CLI string (``true``/``yes``/``1``)."""
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return bool(value)


def as_name_list(values: Sequence[str] | str, what: str, pattern: re.Pattern[str]) -> list[str]:
    """Validate a list of names (packages, units, ...) against ``pattern`` (see :func:`as_list`)."""
    names = as_list(values)
    if not names:
        raise ValueError(f"at least one {what} is required")
    for name in names:
        if not isinstance(name, str) or not pattern.match(name):
            raise ValueError(f"invalid {what}: {name!r}")
    return names

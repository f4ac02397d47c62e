"""Fuzz: every string of every example spec, replaced by hostile text, is refused or stays one literal.

For each mutated spec: ``parse_spec`` raises SpecError (``check`` exits 2) or the spec is accepted,
and then rendering never raises, and a value with a line break, NUL or other control character is
never accepted (it could add a line to a config file). A sample also goes through the real CLI.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuforge.render import render_node
from gpuforge.render.files import Secrets
from gpuforge.spec import SpecError, parse_spec, resolve_nodes

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {p.name: yaml.safe_load(p.read_text()) for p in sorted((REPO / "inventories").glob("*.yaml"))}
HOSTILE = [
    "\n", "\r", "\x00", "\x1b[2J", "'", '"', ";", "$(touch /tmp/p)", "`id`", "#", "..", "../../etc", "-oProxyCommand=x",
    " ", "{", "}", "%", "\\", "é", "\u2028", "*", "[", "]", ",", "=", "\t",
]  # fmt: skip
Path_ = tuple[Any, ...]


def string_leaves(node: Any, path: Path_ = ()) -> Iterator[Path_]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from string_leaves(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from string_leaves(v, (*path, i))
    elif isinstance(node, str):
        yield path


LEAVES = [(name, path) for name, data in EXAMPLES.items() for path in string_leaves(data)]


def set_at(data: Any, path: Path_, value: str) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def get_at(data: Any, path: Path_) -> str:
    for part in path:
        data = data[part]
    return str(data)


hostile_values = st.builds(
    lambda frag, where, n: {"prefix": frag * n + "{v}", "suffix": "{v}" + frag * n, "replace": frag * n}[where],
    st.sampled_from(HOSTILE),
    st.sampled_from(["prefix", "suffix", "replace"]),
    st.integers(1, 3),
) | st.just("x" * 5000)


def mutate(leaf: int, template: str) -> tuple[dict[str, Any], str]:
    name, path = LEAVES[leaf]
    data = copy.deepcopy(EXAMPLES[name])
    value = template.replace("{v}", get_at(data, path))
    set_at(data, path, value)
    return data, value


@settings(max_examples=2000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(LEAVES) - 1), hostile_values)
def test_hostile_strings_are_refused_or_stay_literal(leaf: int, template: str) -> None:
    data, value = mutate(leaf, template)
    try:
        spec = parse_spec(yaml.safe_dump(data))
    except SpecError:
        return
    where = ".".join(map(str, LEAVES[leaf][1]))
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F or c in "\u2028\u2029" for c in value), (
        f"{LEAVES[leaf][0]}: {where}={value!r} was accepted: a control character or line break can add a line"
    )
    nodes = resolve_nodes(spec)
    for node in {nodes[0].name: nodes[0], nodes[-1].name: nodes[-1]}.values():
        for f in render_node(spec, node, Secrets.redacted()):
            f.data.decode("utf-8")


def test_the_fuzz_reaches_every_example_and_many_fields() -> None:
    assert {name for name, _ in LEAVES} == set(EXAMPLES) and len(LEAVES) >= 100


@pytest.mark.parametrize("leaf", range(0, len(LEAVES), max(1, len(LEAVES) // 12)))
def test_cli_check_refuses_a_newline_with_exit_2(leaf: int, tmp_path: Path) -> None:
    data, _ = mutate(leaf, "{v}\nSlurmctldHost=evil")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    argv = [sys.executable, "-m", "gpuforge", "check", str(spec)]
    cp = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, (LEAVES[leaf], cp.stdout, cp.stderr)

"""Fuzz: hostile input is refused with exit 2 or accepted, never a traceback, never slow.

Two fuzzers, over every example inventory:

* strings (hypothesis, 2,000 examples): every string of every example replaced by hostile text; the
  spec is refused (SpecError, ``check`` exits 2) or accepted, and then rendering never raises and no
  value with a line break, NUL or other control character was accepted (it could add a line to a
  config file);
* structure (``tests/spec/mutations.py``, 2,000 specs from a fixed seed): types swapped, keys and
  items deleted, huge and negative numbers, hostile strings, hostlists of millions of names, deep
  nesting, aliases (recursive, a bomb, hundreds), long account chains, tags, cut and flipped bytes.
  Each spec goes through ``gpuforge check``'s Python entry (the command function itself: exit 0 or
  2 by ``typer.Exit``; any other exception is the traceback the CLI would print), an accepted one is
  rendered, and each check stays under a second; every input limit must be met by some spec.

A sample of both also goes through the real CLI in subprocesses, which must agree.
"""

from __future__ import annotations

import contextlib
import copy
import io
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuforge.cli_spec import check
from gpuforge.render import render_node
from gpuforge.render.files import Secrets
from gpuforge.spec import SpecError, load_spec, parse_spec, resolve_nodes
from gpuforge.spec.limits import BUNDLE_MANIFEST_BYTES, LIMITS
from tests import yaml_text
from tests.spec.mutations import Mutated, mutated_specs

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
        spec = parse_spec(yaml_text.dump(data))
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
    spec.write_text(yaml_text.dump(data))
    argv = [sys.executable, "-m", "gpuforge", "check", str(spec)]
    cp = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, (LEAVES[leaf], cp.stdout, cp.stderr)


# --------------------------------------------------------------------------- structure-aware mutations

STRUCTURED_COUNT = 2000
SEED = 20261125
#: A check of any file up to the size limit takes under a CPU second (the check's own thread's CPU
#: time: a busy machine stretches wall-clock time, not the work); this ceiling is for slow CI.
CHECK_SECONDS = 2.0


@dataclass(frozen=True)
class Outcome:
    """What ``gpuforge check`` did with one mutated spec."""

    spec: Mutated
    exit_code: int | None
    output: str
    seconds: float
    crash: str | None
    """The exception the CLI would have printed as a traceback (None: it exited 0 or 2)."""


def check_in_process(path: Path) -> tuple[int | None, str, str | None]:
    """``gpuforge check --json PATH`` through the command's function: (exit code, output, crash)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            check(path, json_out=True)
    except typer.Exit as e:
        return e.exit_code, out.getvalue(), None
    except Exception as e:  # the traceback the CLI would print
        return None, out.getvalue(), f"{type(e).__name__}: {e}"
    return 0, out.getvalue(), None


def render_accepted(path: Path) -> str | None:
    """Render the first and last node of an accepted spec; the exception's text if one raises."""
    try:
        spec = load_spec(path)
        nodes = resolve_nodes(spec)
        for node in {nodes[0].name: nodes[0], nodes[-1].name: nodes[-1]}.values():
            for f in render_node(spec, node, Secrets.redacted()):
                f.data.decode("utf-8")
    except Exception as e:
        return f"render: {type(e).__name__}: {e}"
    return None


@cache
def structured_outcomes() -> tuple[Outcome, ...]:
    """Every structured mutation checked once per session (a folder of its own, kept for a failure)."""
    import gc
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="gpuforge-fuzz-"))
    outcomes = []
    for i, spec in enumerate(mutated_specs(STRUCTURED_COUNT, SEED)):
        path = where / f"spec{i:04d}.yaml"
        path.write_bytes(spec.data)
        # This thread's CPU time, no collection of the session's heap: not other threads of the
        # worker, not garbage of earlier tests (a fresh run once read 2.08 s for a check of 0.7 s).
        gc.disable()
        try:
            started = time.thread_time()
            code, output, crash = check_in_process(path)
            seconds = time.thread_time() - started
        finally:
            gc.enable()
        if code == 0 and crash is None:
            crash = render_accepted(path)
        outcomes.append(Outcome(spec, code, output, seconds, crash))
    return tuple(outcomes)


def test_structured_mutations_are_ok_or_exit_2_never_a_traceback() -> None:
    outcomes = structured_outcomes()
    assert len(outcomes) >= 2000
    bad = [f"{o.spec.label}: {o.crash}" for o in outcomes if o.crash is not None]
    assert not bad, f"{len(bad)} traceback(s):\n" + "\n".join(bad[:20])
    wrong = [f"{o.spec.label}: exit {o.exit_code}" for o in outcomes if o.exit_code not in (0, 2)]
    assert not wrong, "\n".join(wrong[:20])
    slow = [f"{o.spec.label}: {o.seconds:.2f} s" for o in outcomes if o.seconds > CHECK_SECONDS]
    assert not slow, "\n".join(slow[:20])


def test_structured_mutations_meet_every_limit_and_both_outcomes() -> None:
    """The fuzz is not all trivial refusals: many specs are accepted, and each spec limit refuses some."""
    outcomes = structured_outcomes()
    accepted = sum(o.exit_code == 0 for o in outcomes)
    assert accepted >= len(outcomes) // 20, f"only {accepted} accepted"
    assert sum(o.exit_code == 2 for o in outcomes) >= len(outcomes) // 2
    outputs = "\n".join(o.output for o in outcomes)
    refusals = {
        limit.what: (f"{limit.what}; the limit is {limit.value:,}", f"more than {limit.value:,} {limit.what}")
        for limit in LIMITS
        if limit is not BUNDLE_MANIFEST_BYTES
    }
    unmet = [what for what, texts in refusals.items() if not any(text in outputs for text in texts)]
    assert not unmet, f"no mutated spec met the limit(s): {unmet}"


def test_a_sample_through_the_real_cli_agrees(tmp_path: Path) -> None:
    """16 of the structured specs (every kind of outcome) as ``python -m gpuforge check``, 4 at a time."""
    outcomes = structured_outcomes()
    refused_by_limit = [o for o in outcomes if "refused:" in o.output][:4]
    sample = [*outcomes[:: len(outcomes) // 12][:12], *refused_by_limit]
    paths = []
    for i, o in enumerate(sample):
        paths.append(tmp_path / f"sample{i:02d}.yaml")
        paths[-1].write_bytes(o.spec.data)

    def run(path: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpuforge", "check", str(path)]
        return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, paths))
    for o, cp in zip(sample, results, strict=True):
        assert "Traceback" not in cp.stderr, (o.spec.label, cp.stderr)
        assert cp.returncode == o.exit_code, (o.spec.label, cp.returncode, cp.stderr[-2000:])

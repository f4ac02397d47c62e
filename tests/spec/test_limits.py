"""Input limits (gpuforge.spec.limits): each reproducer of a cheap input that cost minutes, gigabytes or a
traceback is now refused (SpecError: ``check`` exits 2) naming the limit, or checked in linear time;
and every limit holds exactly at its value: one more is refused, each in well under a second."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec import SpecError, load_spec, parse_spec
from gpuforge.spec.limits import (
    ACCOUNTS,
    FILE_BYTES,
    HOSTLIST_NAMES,
    LIMITS,
    NODES,
    NUMBER_DIGITS,
    PARTITIONS,
    TEXT_CHARS,
    YAML_ALIASES,
    YAML_DEPTH,
    YAML_VALUES,
    Limit,
)
from tests.conftest import REPO

#: CPU seconds, measured well under a second each (see the report in docs/spec-reference.md,
#: Limits); the ceiling leaves room for a slow CI machine.
CHECK_SECONDS = 2.0


def problems(text: str) -> str:
    """Every problem of ``text`` as the CLI prints them ('' when the spec is accepted)."""
    try:
        parse_spec(text, "spec.yaml")
    except SpecError as e:
        return e.format()
    return ""


def timed(text: str) -> tuple[str, float]:
    """The problems of ``text`` and the CPU seconds their check took (this process's CPU time: a busy
    machine stretches wall-clock time, not the work a check does). The coverage tracer, which
    multiplies a call-heavy parse's time (0.7 s of CPU took 2.2 s under ``--cov``), is paused in this
    folder's tests (``NOT_MEASURED`` in tests/conftest.py)."""
    started = time.process_time()
    found = problems(text)
    return found, time.process_time() - started


HW = {"sockets": 2, "cores_per_socket": 32, "threads_per_core": 2, "real_memory_mb": 250000}


def minimal(compute: str = "cpu[1-4]", **slurm: Any) -> dict[str, Any]:
    """A valid Slurm spec: one controller and accounting node, a compute group, one partition."""
    return {
        "cluster": {"name": "t", "scheduler": "slurm"},
        "node_groups": [
            {"name": "ctl", "hosts": "ctl1", "roles": ["controller", "accounting-db"]},
            {"name": "cpu", "hosts": compute, "roles": ["compute"], "hardware": HW},
        ],
        "slurm": {"partitions": [{"name": "batch", "nodes": "cpu", "default": True}], **slurm},
    }


def dump(data: dict[str, Any]) -> str:
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def chain(length: int) -> list[dict[str, str]]:
    return [{"name": "a0"}] + [{"name": f"a{i}", "parent": f"a{i - 1}"} for i in range(1, length)]


def test_the_minimal_spec_is_valid() -> None:
    assert problems(dump(minimal())) == ""


# --------------------------------------------------------------------------- the reproducers


@pytest.mark.parametrize("length", [2500, 5000])
def test_a_parent_chain_of_thousands_of_accounts_checks_in_linear_time(length: int) -> None:
    """Was 25 s of CPU for 2,500 accounts and over 200 s for 5,000 (each walked its whole chain)."""
    found, seconds = timed(dump(minimal(accounts=chain(length))))
    assert found == "" and seconds < CHECK_SECONDS, (found[:500], seconds)


def test_a_cycle_through_thousands_of_accounts_is_reported_in_linear_time() -> None:
    accounts = chain(ACCOUNTS.value)
    accounts[0]["parent"] = accounts[-1]["name"]
    found, seconds = timed(dump(minimal(accounts=accounts)))
    assert seconds < CHECK_SECONDS
    assert found.count("is its own ancestor") == ACCOUNTS.value
    assert (
        "account 'a7' is its own ancestor (a7 -> a6 -> a5 -> a4 -> a3 -> a2 -> ... (5,000 in the cycle) -> a7)" in found
    )


def test_thirty_groups_of_100000_hosts_are_refused_before_any_is_expanded() -> None:
    """Was 57 s and 1.45 GB for a 2.5 KB file; now refused from the hostlists as written."""
    data = minimal()
    data["node_groups"] += [{"name": f"g{i}", "hosts": f"n{i}x[1-100000]", "roles": ["compute"]} for i in range(30)]
    text = dump(data)
    assert len(text) < 2600
    tracemalloc.start()
    found, seconds = timed(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert f"node_groups: refused: 3,000,005 nodes; the limit is {NODES.value:,}" in found
    assert seconds < 1.0 and peak < 20 * 2**20, (seconds, peak)


def test_a_recursive_alias_is_refused() -> None:
    """``cluster: &c {self: *c}`` was a RecursionError traceback."""
    found = problems("cluster: &c {self: *c}\n")
    assert "spec.yaml:1: (top level): refused: an alias inside its own anchor (a recursive alias)" in found


@pytest.mark.parametrize(
    ("number", "why"),
    [
        ("9" * 4301, TEXT_CHARS.refusal(4301)),
        ("9" * 19, NUMBER_DIGITS.refusal(19)),
        ("0x" + "f" * 17, NUMBER_DIGITS.refusal(19)),
        ("9_" * 19 + "9", NUMBER_DIGITS.refusal(20)),
    ],
)
def test_an_integer_too_long_is_refused(number: str, why: str) -> None:
    """An integer over 4,300 digits was a ValueError traceback (Python refuses to convert it)."""
    text = dump(minimal()).replace("hosts: ctl1\n", "hosts: ctl1\n  hardware: {sockets: NUMBER}\n")
    found = problems(text.replace("NUMBER", number))
    assert why in found and "Traceback" not in found


@pytest.mark.parametrize(
    ("bound", "why"),
    [("9" * 4301, TEXT_CHARS.refusal(len("cpu[1-]") + 4301)), ("9" * 19, NUMBER_DIGITS.refusal(19))],
)
def test_a_hostlist_range_bound_too_long_is_refused(bound: str, why: str) -> None:
    found = problems(dump(minimal(compute=f"cpu[1-{bound}]")))
    assert why in found, found[:600]


def test_check_dev_zero_exits_2_at_once() -> None:
    """``gpuforge check /dev/zero`` read forever; now the file's type is checked before reading."""
    started = time.perf_counter()
    cp = subprocess.run(
        [sys.executable, "-m", "gpuforge", "check", "/dev/zero"], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert cp.returncode == 2 and "Traceback" not in cp.stderr, cp.stderr
    assert "refused: a device, FIFO or socket, not a regular file" in cp.stderr
    assert time.perf_counter() - started < 30


@pytest.mark.parametrize("kind", ["fifo", "directory", "sparse"])
def test_what_is_no_spec_file_is_refused_without_reading_it(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "spec.yaml"
    if kind == "fifo":
        os.mkfifo(path)  # opened without waiting for a writer
    elif kind == "directory":
        path.mkdir()
    else:
        with path.open("wb") as f:
            f.truncate(8 * 2**30)  # 8 GiB of nothing: refused by its size, never read
    started = time.perf_counter()
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert time.perf_counter() - started < 1.0
    assert "refused: " in info.value.format()


# --------------------------------------------------------------------------- every limit at its edge


def _nodes(count: int) -> str:
    return dump(minimal(compute=f"cpu[1-{count - 1}]"))  # ctl1 is the other node


def _host_names(count: int) -> str:
    """Nodes at their limit, and partitions naming the 9,999-node group until ``count`` names."""
    compute = NODES.value - 1
    data = minimal(compute=f"cpu[1-{compute}]")
    partitions = (count - NODES.value) // compute
    data["slurm"]["partitions"] += [{"name": f"p{i}", "nodes": "cpu"} for i in range(1, partitions)]
    data["slurm"]["partitions"] += [{"name": "rest", "nodes": f"cpu[1-{count - NODES.value - partitions * compute}]"}]
    return dump(data)


def _partitions(count: int) -> str:
    data = minimal()
    data["slurm"]["partitions"] += [{"name": f"p{i}", "nodes": "cpu"} for i in range(1, count)]
    return dump(data)


def _accounts(count: int) -> str:
    return dump(minimal(accounts=chain(count)))


def _depth(levels: int) -> str:
    return dump(minimal()) + "x: " + "[" * (levels - 1) + "]" * (levels - 1) + "\n"  # the document is a level


def _aliases(count: int) -> str:
    return dump(minimal()) + "base: &v 1\nx: [" + ", ".join(["*v"] * count) + "]\n"


def _values(count: int) -> str:
    text = dump(minimal())
    events = yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    have = sum(isinstance(e, yaml.NodeEvent) for e in events) + 2  # the key 'x' and its list
    return text + "x: [" + ",".join(["0"] * (count - have)) + "]\n"


def _text(chars: int) -> str:
    return dump(minimal()) + "x: " + "a" * chars + "\n"


def _digits(digits: int) -> str:
    return dump(minimal()) + "x: " + "9" * digits + "\n"


def _file_bytes(size: int) -> str:
    text = dump(minimal()) + "#"
    return text + "x" * (size - len(text) - 1) + "\n"


EDGES: dict[str, tuple[Limit, Callable[[int], str]]] = {
    "nodes": (NODES, _nodes),
    "host-names": (HOSTLIST_NAMES, _host_names),
    "partitions": (PARTITIONS, _partitions),
    "accounts": (ACCOUNTS, _accounts),
    "yaml-depth": (YAML_DEPTH, _depth),
    "yaml-aliases": (YAML_ALIASES, _aliases),
    "yaml-values": (YAML_VALUES, _values),
    "text-chars": (TEXT_CHARS, _text),
    "number-digits": (NUMBER_DIGITS, _digits),
    "file-bytes": (FILE_BYTES, _file_bytes),
}


def test_every_spec_limit_is_tested_at_its_edge() -> None:
    assert {limit for limit, _ in EDGES.values()} == {limit for limit in LIMITS if "bundle" not in limit.what}


@pytest.mark.parametrize("name", EDGES)
def test_a_limit_holds_at_its_value_and_refuses_one_more(name: str) -> None:
    limit, make = EDGES[name]
    at, at_seconds = timed(make(limit.value))
    over, over_seconds = timed(make(limit.value + 1))
    assert limit.what not in at, at[:600]
    assert (limit.what in over and f"the limit is {limit.value:,}" in over) or "the limit (docs" in over, over[:600]
    assert over.startswith("spec.yaml: ") and "refused: " in over
    assert at_seconds < CHECK_SECONDS and over_seconds < CHECK_SECONDS, (at_seconds, over_seconds)


def test_the_limits_are_documented() -> None:
    doc = (REPO / "docs" / "spec-reference.md").read_text()
    assert "## Limits" in doc
    for limit in LIMITS:
        assert f"| {limit.what} | {limit.value:,} |" in doc


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("cluster: &c {self: *c}\n", "a recursive alias"),
        ("a: " + "[" * 70 + "]" * 70 + "\n", YAML_DEPTH.refusal()),
        ("a: &a [1, 1]\nb: [" + ", ".join(["*a"] * 300) + "]\n", YAML_ALIASES.refusal()),
        ("a: " + "9" * 19 + "\n", NUMBER_DIGITS.refusal(19)),
    ],
)
def test_without_libyaml_the_same_refusals(monkeypatch: pytest.MonkeyPatch, text: str, why: str) -> None:
    """PyYAML built without libyaml parses with its own (slower) parser, under the same limits."""
    from gpuforge.spec import safe_yaml

    monkeypatch.setattr(safe_yaml, "_Loader", safe_yaml._PyLoader)
    assert why in problems(text)

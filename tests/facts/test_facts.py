"""Data-driven tests for gpuforge facts (pyinfra style).

Each ``fixtures/<module>/<case>.json`` holds::

    {"fact": "nvidia.NvidiaSmiGpus", "args": [...], "command": "<expected command>",
     "output": ["line", ...], "fact_value": <expected processed value>, "source": "<provenance>"}

``command()`` must produce exactly ``command`` and ``process(output)`` exactly ``fact_value``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyinfra.api import FactBase

FIXTURE_DIR = Path(__file__).parent / "fixtures"
FIXTURES = sorted(FIXTURE_DIR.glob("*/*.json"))
FACT_MODULES = ("nvidia", "mig", "packages", "dcgm", "slurm", "systemd", "files")
REQUIRED_KEYS = {"fact", "command", "output", "fact_value", "source"}


def load_fact(name: str) -> type[FactBase[Any]]:
    module_name, class_name = name.rsplit(".", 1)
    module = importlib.import_module(f"gpuforge.deploy.facts.{module_name}")
    fact = getattr(module, class_name)
    assert issubclass(fact, FactBase), name
    return fact


def all_facts() -> list[type[FactBase[Any]]]:
    facts = []
    for module_name in FACT_MODULES:
        module = importlib.import_module(f"gpuforge.deploy.facts.{module_name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, FactBase) and obj.__module__ == module.__name__:
                facts.append(obj)
    return facts


def plain(value: Any) -> Any:
    """A fact value as plain data: dataclass values (NvidiaHost's HostFacts) become dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def short_name(fact: type[FactBase[Any]]) -> str:
    return f"{fact.__module__.rsplit('.', 1)[-1]}.{fact.__name__}"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fact_fixture(path: Path) -> None:
    data = json.loads(path.read_text())
    assert set(data) >= REQUIRED_KEYS, f"missing keys: {REQUIRED_KEYS - set(data)}"
    assert data["source"].strip(), "every fixture must say where its output came from"
    assert data["fact"].split(".")[0] == path.parent.name, "fixture lives under its module's directory"
    fact = load_fact(data["fact"])()

    command = fact.command(*data.get("args", []), **data.get("kwargs", {}))
    assert str(command) == data["command"]

    value = plain(fact.process(data["output"]))
    assert json.loads(json.dumps(value)) == value, "fact values must be JSON-serialisable"
    assert value == data["fact_value"]


def test_fixture_count_and_coverage() -> None:
    assert len(FIXTURES) >= 35
    covered = {json.loads(path.read_text())["fact"] for path in FIXTURES}
    missing = sorted(short_name(fact) for fact in all_facts() if short_name(fact) not in covered)
    assert not missing, f"facts without a fixture: {missing}"


@pytest.mark.parametrize("fact", all_facts(), ids=short_name)
def test_default_is_json_serialisable(fact: type[FactBase[Any]]) -> None:
    value = plain(fact.default())
    assert json.loads(json.dumps(value)) == value


@pytest.mark.parametrize("fact", all_facts(), ids=short_name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=80),
            st.sampled_from(["__rc=9", "__rc=", "__missing=x", "__source=dmesg", "__file=/x", "__stat=a|b"]),
            st.text(alphabet='|:=,+- GPUNVRMXidLink0123456789abcdef()[]{}\t"', max_size=60),
        ),
        max_size=12,
    )
)
def test_process_never_raises(fact: type[FactBase[Any]], lines: list[str]) -> None:
    value = plain(fact().process(lines))
    json.dumps(value)

"""Every node reading (``gpuforge.probes``) against its recorded outputs, and the pyinfra facts of them.

Each ``fixtures/<group>/<case>.json`` holds::

    {"reading": "nvidia.gpu_query", "args": [...], "kwargs": {...}, "command": "<expected command>",
     "output": ["line", ...], "fact_value": <expected parsed value>, "source": "<provenance>"}

``command(*args)`` must produce exactly ``command`` and ``parse(output)`` exactly ``fact_value``,
for the reading and for its pyinfra fact (``gpuforge.deploy.facts.adapter.reading_fact``) alike.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuforge.deploy.facts.adapter import reading_fact
from gpuforge.deploy.facts.layer import LAYER_STATE, LayerState
from gpuforge.deploy.facts.nvidia import NvidiaHost
from gpuforge.deploy.facts.slurm import SacctmgrEntities
from gpuforge.probes.index import READINGS
from gpuforge.probes.nvidia_host import NVIDIA_HOST
from gpuforge.probes.reading import Reading
from gpuforge.probes.slurm import SACCTMGR
from gpuforge.validator.node.inputs import INPUTS

FIXTURE_DIR = Path(__file__).parent / "fixtures"
FIXTURES = sorted(FIXTURE_DIR.glob("*/*.json"))
REQUIRED_KEYS = {"reading", "command", "output", "fact_value", "source"}


def plain(value: Any) -> Any:
    """A parsed value as plain data: dataclass values (HostFacts, CommandOutput, ...) become dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_reading_and_its_fact_on_a_recorded_output(path: Path) -> None:
    data = json.loads(path.read_text())
    assert set(data) >= REQUIRED_KEYS, f"missing keys: {REQUIRED_KEYS - set(data)}"
    assert data["source"].strip(), "every fixture must say where its output came from"
    assert data["reading"].split(".")[0] == path.parent.name, "fixture lives under its reading's group"
    reading = READINGS[data["reading"]]
    args, kwargs = data.get("args", []), data.get("kwargs", {})

    assert reading.command(*args, **kwargs) == data["command"]
    value = plain(reading.parse(data["output"]))
    assert json.loads(json.dumps(value)) == value, "parsed values must be JSON-serialisable"
    assert value == data["fact_value"]

    fact = reading_fact(reading)()
    assert str(fact.command(*args, **kwargs)) == data["command"]
    assert plain(fact.process(data["output"])) == value


def test_every_reading_has_a_recorded_output() -> None:
    assert len(FIXTURES) >= 35
    covered = {json.loads(path.read_text())["reading"] for path in FIXTURES}
    assert not sorted(set(READINGS) - covered), "readings without a fixture"
    assert covered <= set(READINGS), "fixtures of readings that do not exist"


def test_the_deploys_facts_are_the_readings_adapters() -> None:
    assert NvidiaHost is reading_fact(NVIDIA_HOST)
    assert SacctmgrEntities is reading_fact(SACCTMGR)
    assert LayerState is reading_fact(LAYER_STATE)
    assert NvidiaHost.name == "gpuforge.deploy.facts.adapter.NvidiaHost"
    assert len({reading_fact(r).name for r in READINGS.values()}) == len(READINGS)


def test_the_node_checks_read_these_very_readings() -> None:
    """What a node check reads is one of the readings above (the same object), never a copy."""
    for node_input in INPUTS.values():
        assert READINGS[node_input.reading.name] is node_input.reading, node_input.key


@pytest.mark.parametrize("reading", READINGS.values(), ids=lambda r: r.name)
def test_default_is_json_serialisable(reading: Reading[Any]) -> None:
    value = plain(reading_fact(reading).default())
    assert json.loads(json.dumps(value)) == value


@pytest.mark.parametrize("reading", READINGS.values(), ids=lambda r: r.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=80),
            st.sampled_from(
                [
                    "__rc=9",
                    "__rc=",
                    "__missing=x",
                    "__source=dmesg",
                    "__file=/x",
                    "__stat=a|b",
                    "__timeout=8",
                    "__error=refused",
                    "__mode=docker",
                ]
            ),
            st.text(alphabet='|:=,+- GPUNVRMXidLink0123456789abcdef()[]{}\t"', max_size=60),
        ),
        max_size=12,
    )
)
def test_parse_never_raises(reading: Reading[Any], lines: list[str]) -> None:
    json.dumps(plain(reading.parse(lines)))

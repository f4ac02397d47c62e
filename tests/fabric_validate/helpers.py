"""Specs with a fabric, and recorded outputs, for the fabric validation tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpuforge.spec import parse_spec, resolve_nodes
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node
from tests import yaml_text
from tests.validator.vhelpers import FACT_FIXTURES, INVENTORIES

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures"


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def fact_output(name: str) -> list[str]:
    """A fabric fact fixture's recorded output."""
    data: dict[str, Any] = json.loads((FACT_FIXTURES / "fabric" / f"{name}.json").read_text())
    return list(data["output"])


def fabric_lab(
    fabric: dict[str, Any] | None = None, hosts: str = "node[2-5]", leaves: Any = "leaf1", gpu: bool = False
) -> dict[str, Any]:
    """inventories/lab.yaml with the worker group ``hosts`` given ``fabric`` (None: no fabric) and leaf switch(es)."""
    data: dict[str, Any] = yaml.safe_load((INVENTORIES / "lab.yaml").read_text())
    workers = data["node_groups"][1]
    workers.update(hosts=hosts, leaf_switch=leaves)
    workers["hardware"] = dict(workers["hardware"])
    if gpu:
        workers["hardware"]["gpu"] = {"model": "H100-80GB", "count": 8}
    if fabric is not None:
        workers["fabric"] = fabric
    names = set(leaves.keys()) if isinstance(leaves, dict) else {leaves}
    data["topology"] = {"switches": [{"name": n} for n in sorted(names)]}
    return data


def spec_of(data: dict[str, Any]) -> Spec:
    return parse_spec(yaml_text.dump(data, sort_keys=False))


def node(spec: Spec, name: str) -> Node:
    return next(n for n in resolve_nodes(spec) if n.name == name)


ROCE = {"type": "roce", "soft_roce": ["eth1"], "thresholds": {"write_bw_gbps": 5, "read_lat_us": 500}}

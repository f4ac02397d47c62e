"""Shared data of the Network Operator tests: the Kubernetes example with a fabric on its GPU groups."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from gpuforge.spec import SpecError, parse_spec
from gpuforge.spec.model import Spec
from tests import yaml_text
from tests.helpers import INVENTORIES

EXAMPLE = INVENTORIES / "k8s-gpu-operator.yaml"
CHART = "network-operator-26.4.1.tgz"


def data(**fabric: Any) -> dict[str, Any]:
    """The example's data; ``fabric`` (default ``{type: infiniband}``) on its two GPU groups."""
    d: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    for g in d["node_groups"]:
        if g["name"] in ("gpu", "infer"):
            g["fabric"] = copy.deepcopy(fabric or {"type": "infiniband"})
    return d


def group(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in d["node_groups"] if g["name"] == name)


def operator(d: dict[str, Any]) -> dict[str, Any]:
    """The data's ``kubernetes.network_operator`` mapping (made when missing)."""
    return d["kubernetes"].setdefault("network_operator", {})


def spec_of(d: dict[str, Any]) -> Spec:
    return parse_spec(yaml_text.dump(d))


def with_(change: Callable[[dict[str, Any]], None], **fabric: Any) -> Spec:
    d = data(**fabric)
    change(d)
    return spec_of(d)


def cpu_only(d: dict[str, Any]) -> None:
    """The example without GPUs (nor what needs them: MIG, GPU quotas)."""
    for g in d["node_groups"]:
        g.get("hardware", {}).pop("gpu", None)
        g.get("hardware", {}).pop("nvswitch", None)
        g.pop("mig_config", None)
    d.pop("mig", None)
    d["kubernetes"]["gpu_operator"].pop("mig_strategy", None)
    d["kubernetes"]["batch_queue"]["tenants"] = []


def problems(d: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as err:
        spec_of(d)
    return err.value.format()

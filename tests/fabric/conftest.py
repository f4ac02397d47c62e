"""Shared data of the fabric tests: a small Slurm spec whose GPU group has a fabric."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuforge.spec import SpecError, parse_spec, resolve_nodes
from gpuforge.spec.model import Spec
from gpuforge.spec.nodes import Node
from tests import yaml_text

FINGERPRINT = "0123456789ABCDEF0123456789ABCDEF01234567"
#: Every compute group states its CPU and memory figures (a Slurm NodeName line never has a default).
FIGURES = {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "real_memory_mb": 8000}

BASE: dict[str, Any] = {
    "cluster": {"name": "fab", "scheduler": "slurm", "os": "ubuntu24.04"},
    "versions": {"driver": {"version": "580.173.02", "flavor": "open", "source": "nvidia"}, "cuda_toolkit": "12.9"},
    "node_groups": [
        {"name": "ctl", "hosts": "ctl1", "roles": ["controller"], "address_start": "10.9.0.11"},
        {
            "name": "gpu", "hosts": "gpu[1-2]", "roles": ["compute"], "address_start": "10.9.0.21",
            "hardware": {"gpu": {"model": "H100-80GB", "count": 8}, **FIGURES},
            "fabric": {"type": "infiniband", "nccl": "2.27.7-1", "nccl_cuda": "12.9"},
        },
        {
            "name": "cpu", "hosts": "cpu1", "roles": ["compute"], "address_start": "10.9.0.31", "hardware": FIGURES,
            "fabric": {"type": "roce", "soft_roce": ["eth1"]},
        },
    ],
    "slurm": {"accounting": {"enabled": False}, "partitions": [{"name": "b", "nodes": "gpu,cpu"}]},
}  # fmt: skip


def data() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def group(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in d["node_groups"] if g["name"] == name)


def spec_of(d: dict[str, Any]) -> Spec:
    return parse_spec(yaml_text.dump(d))


def node_of(spec: Spec, name: str) -> Node:
    return next(n for n in resolve_nodes(spec) if n.name == name)


def problems(d: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as err:
        spec_of(d)
    return err.value.format()

"""slurm.conf's ``Gres=`` and gres.conf name the same GRES for every node (a property over specs).

slurmd refuses to register a node whose gres.conf does not match what slurm.conf declares, and
the two files are rendered by different functions: this test holds them together.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from gpuforge.render.slurm import gres_conf, slurm_conf
from gpuforge.spec import hostlist
from gpuforge.spec.model import Spec
from tests.helpers import inventory, variant

DEVICE_RANGE = re.compile(r"^/dev/nvidia(?:\[(\d+)-(\d+)\]|(\d+))$")


def slurm_conf_gres(conf: str) -> dict[str, Counter[tuple[str, str]]]:
    """node -> {(name, type): count} from ``NodeName=... Gres=...`` lines."""
    out: dict[str, Counter[tuple[str, str]]] = {}
    for line in conf.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "NodeName" not in fields or fields["NodeName"] == "DEFAULT":
            continue
        gres: Counter[tuple[str, str]] = Counter()
        for item in filter(None, fields.get("Gres", "").split(",")):
            parts = item.split(":")
            name, typ, count = (parts[0], "", parts[1]) if len(parts) == 2 else parts
            gres[(name, typ)] += int(count)
        for node in hostlist.expand(fields["NodeName"]):
            out[node] = gres
    return out


def autodetected(conf: str) -> set[str]:
    """Nodes whose gres.conf line says ``AutoDetect=nvml``: slurmd finds their GPUs itself."""
    out: set[str] = set()
    for line in conf.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("AutoDetect") == "nvml" and "NodeName" in fields:
            out |= set(hostlist.expand(fields["NodeName"]))
    return out


def gres_conf_gres(conf: str) -> dict[str, Counter[tuple[str, str]]]:
    """node -> {(name, type): count} from gres.conf lines (Count=, or the File= device range)."""
    out: dict[str, Counter[tuple[str, str]]] = {}
    for line in conf.splitlines():
        if not line.startswith("NodeName=") or "Name=" not in line.replace("NodeName=", ""):
            continue
        fields = dict(f.split("=", 1) for f in line.split())
        if "Count" in fields:
            count = int(fields["Count"])
        else:
            m = DEVICE_RANGE.match(fields["File"])
            assert m, f"unexpected File= in {line!r}"
            count = int(m.group(2)) - int(m.group(1)) + 1 if m.group(1) is not None else 1
        for node in hostlist.expand(fields["NodeName"]):
            out.setdefault(node, Counter())[(fields["Name"], fields.get("Type", ""))] += count
    return out


def _mps(d: dict[str, Any]) -> None:
    d["slurm"]["mps"] = {"enabled": True, "shares_per_gpu": 100}


def _whole_gpu_beside_mig(d: dict[str, Any]) -> None:
    """The MIG layout leaves GPU 7 whole: slurm.conf and gres.conf must both count it."""
    name = next(g["mig_config"] for g in d["node_groups"] if g.get("mig_config"))
    d["mig"]["configs"][name] = [
        {"devices": [0, 1, 2, 3, 4, 5, 6], "mig_enabled": True, "mig_devices": {"1g.10gb": 7}},
        {"devices": [7], "mig_enabled": False},
    ]


SPECS = {
    "lab": lambda: inventory("lab"),
    "slurm-h100": lambda: inventory("slurm-h100"),
    "slurm-h100+mps": lambda: variant("slurm-h100", _mps),
    "slurm-h100+whole-gpu-beside-mig": lambda: variant("slurm-h100", _whole_gpu_beside_mig),
    "slurm-h100+mps+whole-gpu-beside-mig": lambda: variant("slurm-h100", lambda d: (_mps(d), _whole_gpu_beside_mig(d))),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_slurm_conf_and_gres_conf_agree_for_every_node(name: str) -> None:
    spec: Spec = SPECS[name]()
    declared = slurm_conf_gres(slurm_conf(spec))
    conf = gres_conf(spec)
    configured = gres_conf_gres(conf)
    auto = autodetected(conf)
    with_gres = {n: g for n, g in declared.items() if g}
    assert with_gres or name == "lab", "the spec declares GPU nodes: some node must have GRES"
    # A node slurmd autodetects may list no lines (MIG slices: Slurm does not sanity-check them);
    # every line it does list must agree with slurm.conf.
    assert set(configured) | auto == set(with_gres)
    for node, gres in with_gres.items():
        if node in auto and node not in configured:
            continue
        assert configured[node] == gres, node

"""No acceptance value leaves its place in the batch script: each string field of ``acceptance``,
given the hostile values of tests/spec/hostile.py, is refused naming the field, or is accepted and
the script still parses (``sh -n``) with the base script's words, line by line."""

from __future__ import annotations

import copy
import shlex
import subprocess
from typing import Any

import pytest
import yaml

from gpuforge.acceptance import batch
from gpuforge.spec import SpecError, parse_spec
from tests import yaml_text
from tests.conftest import REPO
from tests.spec.hostile import FIXED

BASE = yaml.safe_load((REPO / "tests" / "spec" / "fixtures" / "every_field_slurm.yaml").read_text())
FIELDS = [
    ("steps", "container", "image"), ("steps", "disk", "directory"), ("steps", "disk", "size"),
    ("steps", "disk", "block_size"), ("steps", "nccl", "command"), ("steps", "nccl", "min_bytes"),
    ("steps", "nccl", "max_bytes"), ("steps", "nccl", "mpi"), ("spares", 0, "nodes"), ("spares", 0, "partition"),
]  # fmt: skip


def scripts(data: dict[str, Any]) -> list[str]:
    spec = parse_spec(yaml_text.dump(data), base_dir=REPO / "tests" / "spec" / "fixtures")
    return [batch.batch_script(spec, g, "c") for g in batch.plan_groups(spec, batch.campaign_nodes(spec))]


def shape(script: str) -> list[int]:
    return [len(shlex.split(line)) for line in script.splitlines() if line and not line.startswith("#")]


def _site_free(data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data.pop("site", None)  # its paths must exist beside the file; not an acceptance matter
    return data


@pytest.mark.parametrize("path", FIELDS, ids=lambda p: ".".join(map(str, p)))
@pytest.mark.parametrize("hostile", [v for v, _ in FIXED], ids=range(len(FIXED)))
def test_hostile_value_is_refused_or_stays_one_word(path: tuple[Any, ...], hostile: str) -> None:
    base = _site_free(BASE)
    data = copy.deepcopy(base)
    where = data["acceptance"]
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = hostile
    try:
        got = scripts(data)
    except SpecError as e:
        assert "acceptance" in e.format() and str(path[-1]) in e.format()
        return
    want = scripts(base)
    for script, before in zip(got, want, strict=True):
        assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
        assert shape(script) == shape(before), "a value changed the script's words"

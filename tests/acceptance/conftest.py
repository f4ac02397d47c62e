"""Fixtures of the acceptance tests: recorded outputs, a spec on the lab's nodes, a stub Slurm."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.spec import Spec, load_spec
from tests import yaml_text
from tests.acceptance.stub_slurm import StubSlurm

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parents[1]

#: stress-ng in the stub cluster: the real 0.15.06 --metrics-brief lines (tests/acceptance/fixtures),
#: the rate per node from STUB_RATES ("node1=2100,node3=450"); STUB_STRESS_FAIL=<node> fails that node.
STRESS_STUB = r"""#!/bin/sh
node=${SLURMD_NODENAME:-x}
rate=$(printf '%s' "$STUB_RATES" | tr ',' '\n' | sed -n "s/^$node=//p")
rate=${rate:-2000.00}
kind=cpu
case "$*" in *--vm*) kind=vm;; esac
if [ "$STUB_STRESS_FAIL" = "$node" ]; then
  echo "stress-ng: fail:  [4242] $kind: detected memory error" >&2
  exit 2
fi
echo "stress-ng: info:  [4242] dispatching hogs: 1 $kind" >&2
echo "stress-ng: metrc: [4242] stressor       bogo ops real time  usr time  sys time   bogo ops/s     bogo ops/s" >&2
echo "stress-ng: metrc: [4242]                           (secs)    (secs)    (secs)   (real time) (usr+sys time)" >&2
echo "stress-ng: metrc: [4242] $kind               10717      5.00      4.61      0.00      $rate        2323.88" >&2
echo "stress-ng: info:  [4242] successful run completed in 5.00s" >&2
"""


def fixture(name: str) -> dict[str, Any]:
    """A recorded output: command, rc, stdout, stderr and where it comes from."""
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def record_of(name: str, step: str = "x", duration: float = 5.0) -> dict[str, Any]:
    """A node runner record made from a recorded output (the shape node_runner.run_step returns)."""
    f = fixture(name)
    return {"name": step, "status": "ran", "rc": f["rc"], "duration_s": duration, "stdout": f["stdout"],
            "stderr": f["stderr"], "timed_out": False}  # fmt: skip


def lab_spec(tmp_path: Path, mutate: Callable[[dict[str, Any]], None] | None = None, name: str = "spec.yaml") -> Path:
    """inventories/lab.yaml (the lab's three nodes), changed by ``mutate``, written under ``tmp_path``."""
    data = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())
    if mutate:
        mutate(data)
    path = tmp_path / name
    path.write_text(yaml_text.dump(data, sort_keys=False))
    return path


@pytest.fixture
def spec_at(tmp_path: Path) -> Callable[..., tuple[Spec, Path]]:
    def make(mutate: Callable[[dict[str, Any]], None] | None = None) -> tuple[Spec, Path]:
        path = lab_spec(tmp_path, mutate)
        return load_spec(path), path

    return make


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StubSlurm:
    """Partition batch = node1, node2; partition spare = node3; stress-ng stubbed; node reports kept in tmp."""
    from gpuforge.acceptance import batch

    monkeypatch.setattr(batch, "KEEP_DIR", str(tmp_path / "keep"))
    s = StubSlurm(tmp_path / "slurm", {"batch": ["node1", "node2"], "spare": ["node3"]}, {"stress-ng": STRESS_STUB})
    return s

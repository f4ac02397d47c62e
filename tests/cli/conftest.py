"""Shared fixtures of the CLI tests: a small spec on simulated nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = yaml.safe_load((REPO / "inventories" / "lab-slurm-minimal.yaml").read_text())
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(tmp_path / "state"))
    return write_simulated_spec(data, tmp_path, "small.yaml")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimulatedCluster:
    return simulated(monkeypatch, tmp_path)

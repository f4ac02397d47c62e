"""``--tags``/``--skip-tags`` through the real apply on simulated nodes: which files the node is
sent and which layers' operations ran, read from the commands the node received (not from the
plan's bookkeeping or the CLI's parsing).

The review found a mutation of the tag path caught only by the CLI's tests; these fail when a
layer the tags leave out still runs, or one they keep does not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpuforge.orchestrate.apply import apply
from gpuforge.render.fabric import fabric_files
from gpuforge.render.files import Secrets
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_KEY, HEALTH_PROGRAM
from gpuforge.render.nvidia import nvidia_files
from gpuforge.render.nvidia_repos import nvidia_repo_files
from gpuforge.spec import load_spec, resolve_nodes
from gpuforge.spec.cluster import load_cluster
from gpuforge.spec.layer_tags import select_layers
from tests.conftest import REPO
from tests.converge.simulated import SimulatedCluster, simulated, write_simulated_spec
from tests.converge.test_simulated_runs import ARTIFACT_PINS

NODE = "gpu001"
#: ``install ... <staging> <path>.gpuforge-new && mv -fT <path>.gpuforge-new <path>``: a file written.
WRITTEN = re.compile(r"mv -fT (\S+)\.gpuforge-new (\S+)")
STAGING = re.compile(r"/var/lib/gpuforge/staging/[0-9a-f]+")


def _spec_file(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO / "inventories" / "slurm-h100.yaml").read_text())
    data["sources"]["artifact_sha256"] = ARTIFACT_PINS
    return write_simulated_spec(data, tmp_path, "hopper.yaml")


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, tags: str | None, skip: str | None
) -> tuple[SimulatedCluster, set[str]]:
    """A first apply of a fresh ``NODE`` (its own state folder): the cluster it talked to, and the
    layers of the operations that changed something."""
    where = tmp_path / name
    where.mkdir()
    monkeypatch.setenv("GPUFORGE_STATE_DIR", str(where / "state"))
    cluster = simulated(monkeypatch, where)
    layers = select_layers(tags, skip) if tags is not None or skip is not None else None
    result = apply(load_cluster(_spec_file(where)), limit=NODE, layers=layers)
    assert result.ok, {n: h.error for n, h in result.hosts.items() if h.error}
    return cluster, {op.split(":", 1)[0] for op in result.hosts[NODE].changed}


def _written(cluster: SimulatedCluster) -> set[str]:
    return {m.group(2) for c in cluster.commands[NODE] for m in WRITTEN.finditer(c) if m.group(1) == m.group(2)}


def _commands(cluster: SimulatedCluster) -> set[str]:
    """The commands that change the node (not the one read of its state, which lists the layers' packages)."""
    return {STAGING.sub("<staging>", c) for c in cluster.commands[NODE] if not c.startswith("echo '__section=")}


def test_tags_health_writes_the_health_files_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, changed = _run(tmp_path, monkeypatch, "tagged", "health", None)
    assert _written(cluster) == {HEALTH_PROGRAM, HEALTH_CONFIG, HEALTH_KEY}
    assert changed == {"health"}
    assert not [c for c in cluster.commands[NODE] if "apt-get" in c or "systemctl" in c], "no package, no unit"


def test_skip_tags_leaves_exactly_those_layers_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full, full_changed = _run(tmp_path, monkeypatch, "full", None, None)
    skipped, skip_changed = _run(tmp_path, monkeypatch, "skipped", None, "nvidia,fabric")
    spec = load_spec(_spec_file(tmp_path / "full"))
    node = next(n for n in resolve_nodes(spec) if n.name == NODE)
    sec = Secrets.redacted()
    theirs = {f.path for r in (nvidia_files, nvidia_repo_files, fabric_files) for f in r(spec, node, sec)}
    assert theirs & _written(full), "the full run writes the skipped layers' files"
    assert _written(skipped) == _written(full) - theirs
    assert _commands(skipped) < _commands(full), "a skipped run changes nothing the full one does not"
    assert full_changed - skip_changed == {"nvidia", "fabric"}
    assert skip_changed == {"base", "packages", "munge", "slurm", "monitoring", "health"}
    assert not [c for c in skipped.commands[NODE] if "cuda-drivers" in c or "nvidia-driver" in c]

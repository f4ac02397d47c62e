"""Shared fixtures: the session lab (gpuforge.lab.pytest_plugin) and a Slurm cluster applied on it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.probes.slurm_metrics import SINFO, parse_sinfo
from gpuforge.render.health import HEALTH_PROGRAM
from tests import yaml_text

pytest_plugins = ["gpuforge.lab.pytest_plugin"]

REPO = Path(__file__).resolve().parents[1]
# The node program runs on this machine in many tests (as root in CI): it must not leave its
# compiled-code cache in /var/cache here. Its own tests name a temporary folder instead.
os.environ["GPUFORGE_NODE_PROGRAM_CACHE"] = "off"
LAB_SPEC = REPO / "inventories" / "lab.yaml"
#: Test folders whose test calls reach no line of gpuforge/deploy or gpuforge/orchestrate that the
#: other folders' tests do not reach too (``--cov-context=test`` over the non-lab suite at a2a624d: the
#: same 6,961 lines covered without their calls; scripts/coverage_reach.py measures it again). The
#: suite measures coverage of those two packages only, and its tracer doubles a CPU-bound test (the
#: structured fuzz: 32 s alone, 66 s traced), so their test calls run untraced (``not_measured``);
#: their fixtures' setup and teardown stay measured.
NOT_MEASURED = frozenset({
    "acceptance", "architecture", "bmc", "docs", "extensions", "fabric_validate", "facts", "lab", "monitoring",
    "packaging", "provision", "render", "spec", "validator",
})  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`NOT_MEASURED`'s folders ``not_measured``."""
    tests = Path(__file__).parent
    for item in items:
        parts = item.path.parts[len(tests.parts) :] if item.path.is_relative_to(tests) else ()
        if len(parts) > 1 and parts[0] in NOT_MEASURED:
            item.add_marker(pytest.mark.not_measured)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A ``not_measured`` test's call runs with no trace function in its thread and none for the
    threads it starts (the coverage tracer's, restored after). Not pytest-cov's ``no_cover``: under
    pytest-xdist (pytest-cov 7.1) a worker runs two coverage collectors, and pausing the one
    ``no_cover`` pauses resumes the other. ``GPUFORGE_TRACE_ALL=1`` traces them all (scripts/coverage_reach.py)."""
    if item.get_closest_marker("not_measured") is None or os.environ.get("GPUFORGE_TRACE_ALL"):
        return (yield)
    tracer, thread_tracer = sys.gettrace(), threading.gettrace()
    sys.settrace(None)
    threading.settrace(None)
    try:
        return (yield)
    finally:
        sys.settrace(tracer)
        threading.settrace(thread_tracer)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run the gpuforge CLI as a user would, capturing everything it prints."""
    return subprocess.run(
        [sys.executable, "-m", "gpuforge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


class LabCluster:
    """The lab's nodes with a spec fitted to them; apply/plan through the CLI."""

    def __init__(self, lab: Any, workdir: Path, state_dir: Path, base: dict[str, Any] | None = None) -> None:
        self.lab = lab
        self.workdir = workdir
        self.env = {"GPUFORGE_STATE_DIR": str(state_dir)}
        self.state_dir = state_dir
        self.base: dict[str, Any] = base if base is not None else yaml.safe_load(LAB_SPEC.read_text())
        self.spec_path = self.write()
        self.outputs: list[str] = []

    def write(
        self, name: str = "spec.yaml", hosts: dict[str, str] | None = None, mutate: Callable[[dict], None] | None = None
    ) -> Path:
        from gpuforge.lab.spec import lab_spec_data

        data = lab_spec_data(self.base, self.lab.state, hosts)
        if mutate:
            mutate(data)
        path = self.workdir / name
        path.write_text(yaml_text.dump(data, sort_keys=False))
        return path

    def apply(self, spec: Path | None = None, *extra: str) -> dict[str, Any]:
        cp = run_cli("apply", "--yes", str(spec or self.spec_path), "--json", *extra, env=self.env)
        self.outputs.append(cp.stdout + cp.stderr)
        assert cp.stdout.strip(), f"apply printed nothing; stderr:\n{cp.stderr}"
        result: dict[str, Any] = json.loads(cp.stdout)
        result["returncode"] = cp.returncode
        self._rerun_health_where_it_drained()
        return result

    def _rerun_health_where_it_drained(self) -> None:
        """Run the health check now on each node it drained. A lab repair (``lab up`` after a test
        killed a node) rewrites /etc/hosts and apt's proxy file with the lab's own content; the health
        check then drains the nodes for files "changed by hand", and after apply restored them they
        stay drained until its next run (HealthCheckInterval): a validate right after the apply
        would find them drained. Run as slurmd runs it (``--slurm``); only its own drains are lifted."""
        cp = self.lab.ssh("node1", shlex.join(SINFO) + " 2>/dev/null")
        try:
            states = parse_sinfo(cp.stdout) if cp.returncode == 0 else {}
        except ValueError:  # not sinfo's node lines: nothing to lift
            states = {}
        lab_nodes = {n.name for n in self.lab.state.nodes}
        for name, (_, reason) in states.items():
            if reason.startswith("gpuforge: health:") and name in lab_nodes:
                self.lab.ssh(name, f"{HEALTH_PROGRAM} --slurm >/dev/null 2>&1")

    def plan(self, spec: Path | None = None) -> dict[str, Any]:
        cp = run_cli("plan", str(spec or self.spec_path), "--json", env=self.env)
        self.outputs.append(cp.stdout + cp.stderr)
        result: dict[str, Any] = json.loads(cp.stdout)
        return result

    def ssh(self, node: str, cmd: str, check: bool = True) -> str:
        cp = self.lab.ssh(node, cmd)
        if check:
            assert cp.returncode == 0, f"{node}: {cmd}: rc={cp.returncode}\n{cp.stdout}\n{cp.stderr}"
        return str(cp.stdout)


@pytest.fixture(scope="session")
def lab_cluster(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    """The lab with inventories/lab.yaml applied once (real munge, MariaDB, slurmdbd, slurmctld, slurmd;
    the spec's users alice, bob and carol made on every node)."""
    cluster = LabCluster(lab, tmp_path_factory.mktemp("lab-spec"), tmp_path_factory.mktemp("gpuforge-state"))
    result = cluster.apply()
    assert result["returncode"] == 0 and result["ok"], json.dumps(result, indent=2)
    yield cluster


@pytest.fixture
def upstream_data() -> Path:
    """../shared/reference/upstream, which tests marked ``needs_upstream`` read: a failure when absent."""
    from tests.helpers import require_upstream

    return require_upstream()

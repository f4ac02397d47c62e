"""The node program is one self-contained file: nodelocal and the probes it imports, nothing else.

Run here the way nodes run it: ``python3 -I`` (no site-packages, no current directory on the
path, so no gpuforge to fall back on), as a file and on stdin as ``gpuforge validate`` sends it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuforge.deploy.layers.health import health_layer
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_PROGRAM
from gpuforge.render.node_program import PACKAGES, embedded_sources, node_program
from tests.architecture.imports import graph
from tests.validator.vhelpers import lab_spec, node, nvidia_gpus_on_this_machine

NODE_PREFIXES = ("gpuforge.probes.", "gpuforge.validator.node.", "gpuforge.validator.nodelocal")


def test_the_program_is_deterministic_and_carries_nodelocal_and_its_probes() -> None:
    assert node_program() == node_program.__wrapped__()  # built again from the sources: same bytes
    sources = embedded_sources()
    assert "gpuforge.validator.nodelocal" in sources
    assert {"gpuforge.probes.nvidia", "gpuforge.probes.nvidia_host", "gpuforge.probes._common"} <= set(sources)
    assert all(sources[p] == "" for p in PACKAGES)
    assert "gpuforge.validator.node.checks_services" in sources  # every check module, registered
    # Nothing but the probes and the checker itself: the node has only the standard library.
    assert all(m in PACKAGES or m.startswith(NODE_PREFIXES) for m in sources), sorted(sources)


def test_the_checker_imports_only_the_standard_library_and_probes() -> None:
    outside = sorted(
        f"{e.importer} line {e.line}: {e.imported}"
        for e in graph()
        if (e.importer == "gpuforge.validator.nodelocal" or e.importer.startswith("gpuforge.validator.node."))
        and e.imported.split(".")[0] not in sys.stdlib_module_names
        and not e.imported.startswith(NODE_PREFIXES)
    )
    assert not outside, outside


def test_the_program_runs_isolated_as_a_file_and_on_stdin(tmp_path: Path) -> None:
    program = tmp_path / "gpuforge-health"
    program.write_bytes(node_program())
    as_file = subprocess.run(
        [sys.executable, "-I", str(program), "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert as_file.returncode == 0 and "gpuforge node health checks" in as_file.stdout, as_file.stderr
    on_stdin = subprocess.run(
        [sys.executable, "-I", "-", "--config", str(tmp_path / "missing.json")],
        input=node_program(),
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    # Exit 2 with the program's own message: it ran, read its arguments, and found no config.
    assert on_stdin.returncode == 2, on_stdin.stderr
    assert b"gpuforge-health: cannot read config" in on_stdin.stderr
    assert b"Traceback" not in on_stdin.stderr


def test_the_program_runs_a_check_from_an_installed_config(tmp_path: Path) -> None:
    """The layer's config and the built program together, as the node has them (node3 has no GPU)."""
    spec, _ = lab_spec(tmp_path)
    layer = health_layer(spec, node(spec, "node3"))
    files = {f.path: f.data for f in layer.files}
    (tmp_path / "health.json").write_bytes(files[HEALTH_CONFIG])
    (tmp_path / "gpuforge-health").write_bytes(files[HEALTH_PROGRAM])
    args = ["--config", "health.json", "--checks", "hardware.gpu_count", "--json", "--no-slurm"]
    cp = subprocess.run(
        [sys.executable, "-I", "gpuforge-health", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    doc = json.loads(cp.stdout)
    assert doc["node"] == "node3"
    (result,) = [r for r in doc["results"] if r["id"] == "hardware.gpu_count"]
    # node3 of the lab spec has no GPUs: skip on a GPU-less bus, fail where NVIDIA GPUs are present.
    assert result["status"] == ("skip" if nvidia_gpus_on_this_machine() == 0 else "fail"), result

"""The node program is one self-contained file: nodelocal, the probes and the Xid table it imports.

Run here the way nodes run it: ``python3 -I`` (no site-packages, no current directory on the
path, so no gpuforge to fall back on), as a file and on stdin as ``gpuforge validate`` sends it.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.deploy.layers.health import health_layer
from gpuforge.render.health import HEALTH_CONFIG, HEALTH_PROGRAM
from gpuforge.render.node_program import PACKAGES, embedded_sources, node_program
from tests.architecture.imports import graph
from tests.validator.vhelpers import lab_spec, node, nvidia_gpus_on_this_machine

NODE_PREFIXES = ("gpuforge.probes.", "gpuforge.validator.node.", "gpuforge.validator.nodelocal")
#: Modules of other rooms the checker reads, standard library only: the Xid table the alert rules read too.
NODE_MODULES = ("gpuforge.spec.xid_catalog",)


def _for_nodes(module: str) -> bool:
    return module.startswith(NODE_PREFIXES) or module in NODE_MODULES


def test_the_program_is_deterministic_and_carries_nodelocal_and_its_probes() -> None:
    assert node_program() == node_program.__wrapped__()  # built again from the sources: same bytes
    sources = embedded_sources()
    assert "gpuforge.validator.nodelocal" in sources
    assert {"gpuforge.probes.nvidia", "gpuforge.probes.nvidia_smi", "gpuforge.probes._common"} <= set(sources)
    assert "gpuforge.spec.xid_catalog" in sources
    assert all(sources[p] == "" for p in PACKAGES)
    assert "gpuforge.validator.node.checks_services" in sources  # every check module, registered
    # Nothing but the probes, the Xid table and the checker itself: the node has only the standard library.
    assert all(m in PACKAGES or _for_nodes(m) for m in sources), sorted(sources)
    assert "gpuforge.probes.index" not in sources  # the readings the checks do not use stay home


def test_every_module_of_the_program_imports_only_the_standard_library_and_its_own() -> None:
    embedded = set(embedded_sources())
    outside = sorted(
        f"{e.importer} line {e.line}: {e.imported}"
        for e in graph()
        if e.importer in embedded
        and e.importer not in PACKAGES  # packages are embedded empty
        and e.imported.split(".")[0] not in sys.stdlib_module_names
        and not _for_nodes(e.imported)
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


def _run_program(program: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUFORGE_NODE_PROGRAM_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-I", str(program), "--help"], capture_output=True, text=True, env=env, timeout=60
    )


def _entry(cache: Path) -> Path:
    (entry,) = cache.iterdir()
    return entry


def _plant(entry: Path, header: bytes) -> None:
    """Replace the cached modules with ones whose entry point prints 'from the cache'."""
    codes = {name: compile("", name, "exec") for name in embedded_sources()}
    codes["gpuforge.validator.nodelocal"] = compile("def main():\n    print('from the cache')\n", "x", "exec")
    entry.write_bytes(header + marshal.dumps(codes))


def test_a_run_keeps_its_compiled_modules_private_and_the_next_run_uses_them(tmp_path: Path) -> None:
    program, cache = tmp_path / "gpuforge-health", tmp_path / "cache" / "node-program"
    program.write_bytes(node_program())
    first = _run_program(program, cache)
    assert first.returncode == 0 and "gpuforge node health checks" in first.stdout, first.stderr
    entry = _entry(cache)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert entry.name == f"{_sources_sha256()}.{sys.implementation.cache_tag}"
    header = entry.read_bytes().split(b"\n", 1)[0] + b"\n"
    assert header.startswith(b"gpuforge-node-program ") and sys.version.encode() in header

    _plant(entry, header)  # what the next run executes is what the cache holds
    assert _run_program(program, cache).stdout == "from the cache\n"


@pytest.mark.parametrize("damage", ["open folder", "open file", "other python", "truncated"])
def test_a_cache_that_is_not_private_or_not_ours_is_never_run(tmp_path: Path, damage: str) -> None:
    """A folder or file others could write, another Python's or a cut-off file: compiled anew."""
    program, cache = tmp_path / "gpuforge-health", tmp_path / "node-program"
    program.write_bytes(node_program())
    assert _run_program(program, cache).returncode == 0
    entry = _entry(cache)
    header = entry.read_bytes().split(b"\n", 1)[0] + b"\n"
    _plant(entry, header.replace(sys.version.encode(), b"3.0.0") if damage == "other python" else header)
    if damage == "open folder":
        cache.chmod(0o770)
    elif damage == "open file":
        entry.chmod(0o644)
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[:-100])
    again = _run_program(program, cache)
    assert again.returncode == 0 and "gpuforge node health checks" in again.stdout, again.stderr
    if damage != "open folder":  # rewritten in place, private again
        assert "from the cache" not in _run_program(program, cache).stdout
        assert stat.S_IMODE(_entry(cache).stat().st_mode) == 0o600


def test_the_cache_keeps_the_newest_programs_only(tmp_path: Path) -> None:
    program, cache = tmp_path / "gpuforge-health", tmp_path / "node-program"
    program.write_bytes(node_program())
    cache.mkdir(mode=0o700)
    for i in range(12):
        old = cache / f"{i:064x}.{sys.implementation.cache_tag}"
        old.write_bytes(b"an older program's modules")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    assert _run_program(program, cache).returncode == 0
    kept = sorted(p.name for p in cache.iterdir())
    assert len(kept) == 8 and f"{_sources_sha256()}.{sys.implementation.cache_tag}" in kept
    assert (
        f"{11:064x}.{sys.implementation.cache_tag}" in kept and f"{0:064x}.{sys.implementation.cache_tag}" not in kept
    )


def test_without_a_cache_folder_the_program_compiles_and_runs(tmp_path: Path) -> None:
    program = tmp_path / "gpuforge-health"
    program.write_bytes(node_program())
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    for where in ("off", str(blocked / "node-program")):
        env = {**os.environ, "GPUFORGE_NODE_PROGRAM_CACHE": where}
        cp = subprocess.run([sys.executable, "-I", str(program), "--help"], capture_output=True, text=True, env=env)
        assert cp.returncode == 0 and "gpuforge node health checks" in cp.stdout, cp.stderr


def _sources_sha256() -> str:
    return hashlib.sha256(json.dumps(embedded_sources(), sort_keys=True).encode()).hexdigest()

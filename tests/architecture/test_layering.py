"""The folders are the pipeline and dependencies point one way.

spec -> render -> (probes) -> validator -> deploy -> orchestrate, with the bundle beside the
deploy side and the lab beside everything; only the deploy side imports pyinfra; probes are
stdlib only (they run on nodes); no module imports another that (transitively) imports it.
"""

from __future__ import annotations

import graphlib
import subprocess
import sys
from collections import defaultdict

import pytest

from tests.architecture.imports import REPO, graph, room, source_modules

ALL_ROOMS = {
    "spec",
    "render",
    "probes",
    "validator",
    "deploy",
    "bundle",
    "orchestrate",
    "acceptance",
    "bmc",
    "provision",
    "extensions",
    "progress",
    "console",
    "lab",
    "image",
    "templates",
    "cli",
    "entry",
    "package",
}

#: The rooms each room may import (besides itself). The health layer installs the validator's
#: node-local program, so deploy may use the validator; never the other way.
ALLOWED: dict[str, set[str]] = {
    "package": set(),
    "progress": set(),
    "console": set(),
    "templates": set(),
    "spec": set(),
    "probes": set(),
    "render": {"spec"},
    "validator": {"spec", "progress", "console", "render", "probes"},
    "deploy": {"spec", "progress", "render", "probes", "validator"},
    "bundle": {"spec", "progress", "render", "deploy"},
    "extensions": {"spec", "progress", "probes"},
    "orchestrate": {"spec", "progress", "render", "deploy", "validator", "bundle", "extensions"},
    "acceptance": {"spec", "progress", "console", "render", "probes", "validator", "deploy", "orchestrate"},
    "bmc": {"spec", "probes", "orchestrate"},  # Redfish power; the day-2 rule reads Slurm over remote.run
    # the boot server (image: its atomic file writer); reimage drains (orchestrate's Slurm commands) and
    # boots and cycles nodes through bmc
    "provision": {"spec", "progress", "render", "image", "bmc", "orchestrate"},
    "lab": {"spec", "console", "render", "probes"},
    "image": {"package", "spec", "progress", "console", "render", "probes", "deploy", "lab"},
    "cli": ALL_ROOMS - {"cli", "entry"},
    "entry": {"deploy"},
}

#: Modules that may import pyinfra: the deploy side and its thin entry points.
PYINFRA_ROOMS = {"deploy", "entry"}

#: Pure modules of the deploy side that others import: they must not import pyinfra either.
PURE_DEPLOY_MODULES = (
    "gpuforge.deploy.nvidia_needs",
    "gpuforge.deploy.converge",
    "gpuforge.deploy.apt",
    "gpuforge.deploy.runstate",
    "gpuforge.deploy.inventory",
    "gpuforge.deploy.secrets",
)


def own_edges() -> list[tuple[str, str, int]]:
    return [(e.importer, e.imported, e.line) for e in graph() if e.imported.startswith(("gpuforge", "deploys"))]


def test_every_module_lives_in_a_known_room() -> None:
    rooms = {room(m) for m in source_modules()}
    assert rooms <= ALL_ROOMS, f"new folders need a place in ALLOWED: {sorted(rooms - ALL_ROOMS)}"
    assert {"spec", "render", "probes", "deploy", "orchestrate", "validator", "bundle", "lab"} <= rooms


def test_rooms_depend_one_way() -> None:
    wrong = sorted(
        f"{a}:{line} ({room(a)}) imports {b} ({room(b)})"
        for a, b, line in own_edges()
        if room(a) != room(b) and room(b) not in ALLOWED[room(a)]
    )
    assert not wrong, "imports against the pipeline:\n" + "\n".join(wrong)


def test_the_allowed_room_graph_itself_has_no_cycle() -> None:
    deps = {r: d for r, d in ALLOWED.items() if r != "cli"}
    list(graphlib.TopologicalSorter(deps).static_order())


@pytest.mark.parametrize("lazy_too", [False, True], ids=["module-level", "including-function-level"])
def test_no_import_cycle(lazy_too: bool) -> None:
    modules = source_modules()
    deps: dict[str, set[str]] = defaultdict(set)
    for e in graph():
        if e.imported in modules and e.imported != e.importer and (lazy_too or e.top_level):
            deps[e.importer].add(e.imported)
    try:
        list(graphlib.TopologicalSorter(deps).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_only_the_deploy_side_imports_pyinfra() -> None:
    importers = sorted(
        f"{e.importer}:{e.line}"
        for e in graph()
        if e.imported.split(".")[0] == "pyinfra"
        and (room(e.importer) not in PYINFRA_ROOMS or e.importer in PURE_DEPLOY_MODULES)
    )
    assert not importers, "pyinfra imported outside the deploy side:\n" + "\n".join(importers)


def test_probes_use_the_standard_library_only() -> None:
    outside = sorted(
        f"{e.importer}:{e.line} imports {e.imported}"
        for e in graph()
        if room(e.importer) == "probes"
        and e.imported.split(".")[0] not in sys.stdlib_module_names
        and not e.imported.startswith("gpuforge.probes")
    )
    assert not outside, "\n".join(outside)


def test_importing_the_rest_loads_no_pyinfra() -> None:
    """Checked in a fresh interpreter: the spec, render, validator, bundle, lab and CLI modules run
    without pyinfra being imported (transitively, too)."""
    modules = [
        m
        for m in source_modules()
        if room(m) in {"spec", "render", "probes", "validator", "bundle", "lab", "cli", "package", "acceptance"}
        or m in PURE_DEPLOY_MODULES
    ]
    assert len(modules) > 40
    code = (
        "import importlib, sys\n"
        f"for m in {sorted(modules)!r}:\n"
        "    importlib.import_module(m)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'pyinfra')\n"
        "print(loaded[:5])\n"
        "sys.exit(1 if loaded else 0)\n"
    )
    cp = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, f"pyinfra was imported: {cp.stdout}{cp.stderr}"


def test_the_deploys_folder_holds_thin_entry_points_only() -> None:
    for name, path in source_modules().items():
        if room(name) != "entry" or path.name == "__init__.py":
            continue
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
        assert len(lines) <= 15, f"{path.name} has {len(lines)} lines: logic belongs in gpuforge/deploy/layers"
        assert f"from gpuforge.deploy.layers.{path.stem} import {path.stem}" in path.read_text()

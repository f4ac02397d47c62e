"""The pyinfra operation that converges one layer (see ``gpuforge.deploy.converge``)."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Generator
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, StringCommand, operation
from pyinfra.api.operation import OperationMeta
from pyinfra.context import state
from pyinfra.facts.files import FileContents

from gpuforge.deploy.context import node, run_state
from gpuforge.deploy.converge import (
    STAGING_DIR,
    Layer,
    LayerFacts,
    Step,
    plan_layer,
    repair_steps,
    sudo_upload_dir_command,
    sudo_upload_temp,
    upload_commands,
)
from gpuforge.deploy.fact_prefetch import FactRequest
from gpuforge.deploy.facts.layer import LayerState
from gpuforge.deploy.runstate import PlannedOp, RunState


def file_diff(path: str, old: list[str] | None, new: bytes) -> str:
    """Unified diff of a non-secret file."""
    new_lines = new.decode(errors="replace").splitlines()
    return "\n".join(difflib.unified_diff(old or [], new_lines, f"{path} (node)", f"{path} (spec)", lineterm="", n=2))


def layer_request(layer: Layer) -> FactRequest:
    """What ``layer`` reads of its host (``LayerState``'s arguments)."""
    return FactRequest(
        packages=tuple(dict.fromkeys([*layer.packages, *layer.watch_packages])),
        paths=tuple(layer.fact_paths),
        units=tuple(s.unit for s in layer.services),
        accounts=tuple(a.name for a in layer.accounts),
        read_paths=tuple(layer.read_paths),
        rpm=layer.rpm,
    )


def _read(request: FactRequest) -> LayerFacts:
    facts: LayerFacts = host.get_fact(LayerState, **request.kwargs())
    return facts


def read_facts(request: FactRequest) -> LayerFacts:
    """This host's state for ``request``: its part of the run's merged read while that stands
    (made now if this is the host's first read), else a read of its own (``fact_prefetch``).
    A request that reads nothing (a layer of ``after`` steps only) costs no round trip."""
    if request == FactRequest():
        return LayerFacts()
    prefetch = run_state().prefetch
    if prefetch is None:
        return _read(request)
    merged = prefetch.pending(host.name)
    if merged is not None:
        prefetch.store(host.name, _read(merged))
    return prefetch.lookup(host.name, request) or _read(request)


def _register(request: FactRequest) -> None:
    """Prepare time: tell the run's merged read what this host's operation will read."""
    prefetch = run_state().prefetch
    if prefetch is not None:
        prefetch.register(host.name, request)


def sudo_user() -> str | None:
    """The SSH user whose uploads ``sudo`` moves into place (None: root logs in, uploads go direct)."""
    user = host.data.get("ssh_user")
    return str(user) if host.data.get("_sudo") and user and user != "root" else None


def step_commands(
    steps: list[Step], via_user: str | None = None, on_step: Callable[[int], None] | None = None
) -> Generator[Any, None, None]:
    """pyinfra commands for planned steps. With ``via_user`` (a non-root SSH user and sudo),
    uploads go through that user's private ``UPLOAD_DIR``, never through ``/tmp``. ``on_step(i)``
    is called as step ``i``'s commands are about to run (pyinfra runs each command as it is
    yielded, and stops at the first that fails)."""
    staged_dir = False
    for i, step in enumerate(steps):
        if on_step is not None:
            on_step(i)
        if step.upload is not None:
            if not staged_dir:
                yield StringCommand(f"install -d -m 0700 {STAGING_DIR}")
                if via_user:
                    yield StringCommand(sudo_upload_dir_command(via_user))
                staged_dir = True
            staged, install = upload_commands(step.upload)
            temp = sudo_upload_temp(staged) if via_user else None
            yield FileUploadCommand(step.upload.open(), staged, remote_temp_filename=temp)
            yield StringCommand(install)
        elif step.command:
            yield StringCommand(step.command)


def converge(name: str, layer: Layer) -> OperationMeta:
    """Add the operation that converges ``layer`` on this host (see :func:`converge_layer`), its
    read registered for the run's merged read. On a host that is in the run for the join token
    only (``RunState.token_hosts``), every other layer is empty: same operations, nothing done."""
    image = run_state().image  # an image build shapes the layer; a plan compares it (deploy.image_mode)
    if image is not None:
        layer = image.layer(host.name, layer)
    if not layer.is_empty and not run_state().converges(host.name, layer.name):
        layer = Layer.empty(layer.name)
    if not layer.is_empty and not layer.rpm and node().os.is_rpm:
        layer = dataclasses.replace(layer, rpm=True)  # the platform row's package manager (package_manager)
    if not layer.is_empty:
        _register(layer_request(layer))
    meta: OperationMeta = converge_layer(name=name, layer=layer)
    return meta


@operation()
def converge_layer(layer: Layer) -> Generator[Any, None, None]:
    """Bring this host's ``layer`` to the desired state; a no-op when it already is.

    Every host runs the same sequence of operations (pyinfra's API orders operations by
    their position per host); hosts without the role pass an empty layer, which costs
    no round trip.
    """
    if layer.is_empty:
        host.noop(f"{layer.name}: not on this node")
        return
    run = run_state()
    facts = read_facts(layer_request(layer))
    steps, changed = plan_layer(layer, facts)
    if state.is_executing:
        # Later operations read it (slurmd restarts for its changed files, a rebuilt pyxis). Under
        # pyinfra's API, as gpuforge runs it, the stage stays at Setup while run_ops executes.
        run.record_changed(host.name, layer.name, changed)
    if not steps:
        host.noop(f"{layer.name} is up to date")
        return
    if run.dry_run:
        planned = PlannedOp(layer.name, steps)
        for step in steps:
            f = step.upload
            if f is not None and not f.secret and not f.streamed:  # bundle files: binary, shown by size
                old = host.get_fact(FileContents, path=f.path)
                planned.diffs[f.path] = file_diff(f.path, old, f.data)
        run.record_planned(host.name, planned)
        return
    yield from step_commands(steps, sudo_user(), _logged(run, steps))


def repair_request(packages: tuple[str, ...]) -> FactRequest:
    return FactRequest(packages=packages)


def repair_packages(name: str, packages: tuple[str, ...]) -> OperationMeta:
    """Add the operation that repairs an interrupted dpkg run (see :func:`repair_interrupted_packages`);
    none on a host in the run for the join token only."""
    if not run_state().converges(host.name, "packages"):
        packages = ()
    if packages:
        _register(repair_request(packages))
    meta: OperationMeta = repair_interrupted_packages(name=name, packages=packages)
    return meta


@operation()
def repair_interrupted_packages(packages: tuple[str, ...]) -> Generator[Any, None, None]:
    """Finish an interrupted dpkg run on this host before anything installs; a no-op when none was.

    A separate operation so that apply reports the repair as its own change.
    """
    if not packages:
        host.noop("packages: none on this node")
        return
    facts = read_facts(repair_request(packages))
    steps = repair_steps(facts)
    if not steps:
        host.noop("packages: dpkg state is clean")
        return
    run = run_state()
    if run.dry_run:
        run.record_planned(host.name, PlannedOp("packages", steps))
        return
    yield from step_commands(steps, sudo_user(), _logged(run, steps))


def _logged(run: RunState, steps: list[Step]) -> Callable[[int], None] | None:
    """Tell the apply's run log which steps this host's operation runs; ``on_step`` for
    :func:`step_commands` (None: no run log)."""
    log, op = run.runlog, host.current_op_hash
    if log is None or op is None:
        return None
    log.steps_begin(host.name, op, steps)
    name = host.name
    return lambda i: log.step_reached(name, op, i)

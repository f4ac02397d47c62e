"""Run the deploys on a spec's nodes with pyinfra's API and collect what happened per host.

One unreachable or failing node does not stop the others: it is reported, the rest converge,
and a re-run finishes it. The run's records (changed paths, plans, reports) live in the
``RunState`` passed in, which every host's data holds.
"""

from __future__ import annotations

import io
import logging
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
from pyinfra.api import Config, Inventory, State
from pyinfra.api.arguments import all_argument_meta, all_global_arguments
from pyinfra.api.deploy import add_deploy
from pyinfra.api.state import BaseStateCallback

from gpuforge.deploy.connect import connect_nodes
from gpuforge.deploy.fact_prefetch import FactPrefetch
from gpuforge.deploy.inventory import HostEntry, inventory_groups
from gpuforge.deploy.layer_progress import LayerProgress, ProgressCallback
from gpuforge.deploy.op_runner import run_ops_each_host_alone
from gpuforge.deploy.runlog_hooks import RunLogCallback
from gpuforge.deploy.runstate import RunState
from gpuforge.progress import Milestone, logging_configured
from gpuforge.spec.cluster import Cluster


def _cache_global_argument_types() -> None:
    """pyinfra 3.10 works out its global arguments' types (``typing.get_type_hints`` on a class
    that never changes) on every operation call and fact: about a sixth of the control host's
    CPU in a no-op re-apply. Same list, computed once (each caller still gets its own copy)."""
    from pyinfra.api import arguments, facts

    computed = arguments.all_global_arguments()

    def all_global_arguments() -> list[tuple[str, type]]:
        return list(computed)

    arguments.all_global_arguments = all_global_arguments
    facts.all_global_arguments = all_global_arguments


_cache_global_argument_types()

NO_OUTPUT = "failed without a word (the command was killed, or the node or the connection went away)"
_CRASH = re.compile(r"Host\(([^)]+)\).*?failed with (\w+)")


def lost_hosts(hub_output: str) -> dict[str, str]:
    """Host name -> exception class, from what gevent's hub wrote about greenlets that crashed."""
    return {m.group(1): m.group(2) for m in _CRASH.finditer(hub_output)}


#: apt/dnf lines that say which package could not be had: kept even when later lines (a retried
#: ``apt-get update`` failing too) would push them out of the last few.
_PACKAGE_ERROR = re.compile(
    r"(Failed to fetch \S+\.(deb|rpm)\b|Unable to locate package|Version '[^']*' for '[^']*' was not found"
    r"|has no installation candidate|No match for argument)"
)


def _last_lines(text: str, n: int = 3) -> str:
    """The last ``n`` lines of a failed command's stderr, led by the first line naming a package."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    tail = lines[-n:]
    key = next((ln for ln in lines if _PACKAGE_ERROR.search(ln)), None)
    if key is not None and key not in tail:
        tail = [key, *tail[1:]]
    return " / ".join(tail)


@dataclass
class HostResult:
    name: str
    connected: bool = True
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    reboot_required: list[str] = field(default_factory=list)
    """Why the node needs a reboot after this run (empty: it does not)."""

    @property
    def ok(self) -> bool:
        return self.connected and self.error is None


@dataclass
class ApplyResult:
    hosts: dict[str, HostResult]
    waiting: dict[str, str] = field(default_factory=dict)
    """Nodes left for an operator, with why (a reboot is needed, or an operator drained the node):
    not failures, but not converged either (``gpuforge apply`` exits 3)."""

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts.values())

    @property
    def changes(self) -> int:
        return sum(len(h.changed) for h in self.hosts.values())


class EndMergedReadsOnChange(BaseStateCallback):
    """Once an operation ran a command, failed or did not finish on any host, the run's merged
    fact reads no longer stand (``gpuforge.deploy.fact_prefetch``). pyinfra runs each operation
    on every host before the next one starts, so the next operation's reads see the change."""

    def __init__(self, prefetch: FactPrefetch) -> None:
        self.prefetch = prefetch

    def operation_end(self, state: Any, op_hash: Any) -> None:  # type: ignore[override]
        if self.prefetch.stale:
            return
        for h in state.inventory:
            data = state.ops.get(h, {}).get(op_hash)
            if data is None:
                continue
            meta = data.operation_meta
            if not meta.is_complete() or meta.did_error() or meta.did_change():
                self.prefetch.invalidate()
                return


def build_state(cluster: Cluster, limit: list[str] | None, run: RunState) -> State:
    """pyinfra's state for one run over the selected nodes (every host's data holds ``run``)."""
    groups = inventory_groups(cluster, limit, run)
    hosts = groups.pop("nodes")
    config = Config(CONNECT_TIMEOUT=10, FAIL_PERCENT=100, PARALLEL=max(1, len(hosts)))
    with_defaults(hosts, config)
    inventory = Inventory((hosts, {}), **{name: (entries, {}) for name, entries in groups.items()})
    return State(inventory, config, check_for_changes=False)


def with_defaults(hosts: list[HostEntry], config: Config) -> None:
    """Each host's data given every operation argument it does not set, at the value pyinfra takes
    from ``config`` when the host has none: the same arguments, found at once. pyinfra looks each
    of its ~30 arguments up in the host's data on every operation call, and a name the host lacks
    is searched through every group it is in before it fails (an exception per argument): a third
    of a 260-spec policy test's CPU time (docs/testing.md)."""
    defaults = {key: all_argument_meta[key].default(config) for key, _ in all_global_arguments()}
    for _, data in hosts:
        for key, value in defaults.items():
            data.setdefault(key, value)


def run_site(
    cluster: Cluster,
    names: list[str] | None,
    run: RunState,
    on_event: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Run the site deploy on ``names`` (every node when None); dry when ``run.dry_run``.

    The first control plane joins the run as a token host when ``names`` leaves it out
    (``kubeadm.token_hosts``): it makes the join token and nothing else, and the result lists
    ``names`` only (:func:`without_token_hosts`). It is not node-locked: it only creates an API
    object through a fresh 0600 file."""
    from gpuforge.deploy.layers.kubeadm import token_hosts
    from gpuforge.deploy.layers.site import site

    spec, say = cluster.spec, on_event or (lambda _msg: None)
    if not logging_configured():  # -v or --log-file asked for pyinfra's log; else it stays quiet
        logging.getLogger("pyinfra").setLevel(logging.CRITICAL)
    run.token_hosts = token_hosts(spec, names, run.layers)
    state = build_state(cluster, None if names is None else [*names, *sorted(run.token_hosts)], run)
    helpers = f" (and {', '.join(sorted(run.token_hosts))} for the join token only)" if run.token_hosts else ""
    say(f"connecting to {len(state.inventory) - len(run.token_hosts)} node(s){helpers}")
    t0 = time.monotonic()
    causes = connect_nodes(state)  # each unreachable node's cause, sanitized (gpuforge.deploy.connect)
    down = sorted(h.name for h in state.inventory if not h.connected)
    reached = sum(1 for h in state.inventory if h.connected and h.name not in run.token_hosts)
    say(
        Milestone(
            f"connected to {reached} node(s) in {time.monotonic() - t0:.1f} s"
            + (f"; unreachable: {', '.join(down)}" if down else "")
        )
    )
    results = {h.name: HostResult(h.name) for h in state.inventory}
    for h in state.inventory:
        if not h.connected:
            results[h.name].connected = False
            results[h.name].error = causes.get(h.name, "unreachable over SSH")
    if not reached:
        return ApplyResult(without_token_hosts(results, run))
    say("planning and converging")
    run.prefetch = FactPrefetch()  # this pyinfra run's own: site Ansible steps change nodes between runs
    state.add_callback_handler(EndMergedReadsOnChange(run.prefetch))
    add_deploy(state, site)
    progress = LayerProgress(say)
    state.add_callback_handler(ProgressCallback(progress))
    logged = RunLogCallback(run.runlog) if run.runlog is not None else None
    if logged is not None:
        state.add_callback_handler(logged)
    # A node that dies mid-run raises out of its operation (paramiko's EOFError): that node fails
    # alone (run_ops_each_host_alone). A crash in another greenlet would be printed by gevent's hub
    # as a traceback: keep it, and report it as that node's error too.
    hub = gevent.get_hub()
    crashes = io.StringIO()
    hub.exception_stream = crashes
    lost: dict[str, str] = {}
    try:
        run_ops_each_host_alone(state, lost)
    except Exception as e:  # pyinfra raises when every host failed
        say(f"stopped: {e}")
    finally:
        hub.exception_stream = sys.stderr
        progress.finish()
        if logged is not None:
            logged.flush(state)
    collect_results(state, run, results, {**lost_hosts(crashes.getvalue()), **lost})
    return ApplyResult(without_token_hosts(results, run))


def collect_results(state: State, run: RunState, results: dict[str, HostResult], lost: dict[str, str]) -> None:
    """Each host's changed and unchanged operations, its error (the first failing operation, a lost
    connection, an unfinished run) and its notes, into ``results``."""
    unfinished: set[str] = set()
    for op_hash in state.get_op_order():
        meta = state.get_op_meta(op_hash)
        op_name = ", ".join(sorted(n.rsplit(" | ", 1)[-1] for n in meta.names))
        for h in state.inventory:
            data = state.ops.get(h, {}).get(op_hash)
            if data is None:
                continue
            om = data.operation_meta
            if not om.is_complete():
                unfinished.add(h.name)
                continue
            if om.did_error():
                results[h.name].error = results[h.name].error or (f"{op_name}: {_last_lines(om.stderr) or NO_OUTPUT}")
            elif om.did_change():
                results[h.name].changed.append(op_name)
            else:
                results[h.name].unchanged += 1
    for h in state.inventory:
        if h.name in lost and results[h.name].error is None:
            results[h.name].error = f"the connection to the node was lost mid-run ({lost[h.name]}); re-run to finish it"
        if h in state.failed_hosts and results[h.name].error is None:
            results[h.name].error = "failed (see above)"
        if h.name in unfinished and results[h.name].connected and results[h.name].error is None:
            results[h.name].error = "the run stopped on this node before its last operation; re-run to finish it"
        # What needs a person: reboots, components with no source, notes (they change nothing).
        results[h.name].notes.extend(f"{s.kind}: {s.summary}" for s in run.report_steps(h.name))
        results[h.name].reboot_required = run.reboot_required(h.name)


def without_token_hosts(results: dict[str, HostResult], run: RunState) -> dict[str, HostResult]:
    """The selected nodes' results, without the run's token hosts: a token host that failed makes
    the error of every node that joins in this run (before that node's own error, if any)."""
    out = {name: h for name, h in results.items() if name not in run.token_hosts}
    for name in sorted(run.token_hosts):
        helper = results.get(name)
        if helper is None or helper.ok:
            continue
        why = f"no join token: {name} (the first control plane, in this run for the token only): {helper.error}"
        for joining in run.k8s_joining():
            if joining in out:
                own = out[joining].error
                out[joining].error = why if own is None else f"{why}; {own}"
    return out

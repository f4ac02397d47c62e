"""Run a pyinfra state's operations in order, each on every active host at once, where one host's
crash fails that host alone.

pyinfra's ``run_ops`` collects each operation's per-host greenlets with ``greenlet.get()``, which
re-raises an exception that escaped one host (paramiko's ``EOFError`` or ``OSError`` when a node
powers off mid-command): the whole run stops there, and every other node is left before its last
operation. Here the exception is caught in that host's greenlet, the host is failed like a host
whose operation failed, and its name and exception class are kept for the run's report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gevent
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_host_op
from pyinfra.context import ctx_host, ctx_state

if TYPE_CHECKING:
    from pyinfra.api import State
    from pyinfra.api.inventory import Host


def run_ops_each_host_alone(state: State, lost: dict[str, str]) -> None:
    """Every operation in order, on the active hosts in parallel (pyinfra's default strategy).

    A host whose operation raised is failed and added to ``lost`` (name -> exception class); the
    others go on. Raises ``PyinfraError`` when no host is left, as pyinfra does."""
    state.is_executing = True
    with ctx_state.use(state):
        for op_hash in state.get_op_order():
            _run_op_everywhere(state, op_hash, lost)


def _run_op_everywhere(state: State, op_hash: str, lost: dict[str, str]) -> None:
    if state.pool is None:
        raise PyinfraError("No pool found on state.")
    state.trigger_callbacks("operation_start", op_hash)
    hosts = list(state.inventory.get_active_hosts())
    greenlets = {state.pool.spawn(_host_op, state, host, op_hash, lost): host for host in hosts}
    gevent.joinall(list(greenlets))
    state.fail_hosts({host for greenlet, host in greenlets.items() if not greenlet.value})
    state.trigger_callbacks("operation_end", op_hash)


def _host_op(state: State, host: Host, op_hash: str, lost: dict[str, str]) -> bool:
    """The operation on one host: its success, or False when it failed or its connection raised."""
    try:
        with ctx_host.use(host):
            return bool(run_host_op(state, host, op_hash))
    except Exception as e:  # the node went away mid-command: this host's failure, not the run's
        lost.setdefault(host.name, type(e).__name__)
        return False

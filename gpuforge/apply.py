"""Run the deploys against a spec's nodes with pyinfra's API.

One unreachable or failing node does not stop the others: it is reported, the rest
converge, and a re-run finishes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operations import run_ops

from gpuforge.inventory import inventory_groups
from gpuforge.operations import layer as layer_ops
from gpuforge.secrets import SecretStore
from gpuforge.spec import Spec, load_spec, select_nodes


def _last_lines(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " / ".join(lines[-n:])


@dataclass
class HostResult:
    name: str
    connected: bool = True
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.connected and self.error is None


@dataclass
class ApplyResult:
    hosts: dict[str, HostResult]

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts.values())

    @property
    def changes(self) -> int:
        return sum(len(h.changed) for h in self.hosts.values())


def build_state(spec: Spec, spec_path: str | Path, limit: list[str] | None) -> State:
    groups = inventory_groups(spec, spec_path, limit)
    hosts = groups.pop("nodes")
    inventory = Inventory((hosts, {}), **{name: (entries, {}) for name, entries in groups.items()})
    config = Config(CONNECT_TIMEOUT=10, FAIL_PERCENT=100, PARALLEL=max(1, len(hosts)))
    return State(inventory, config, check_for_changes=False)


def apply(
    spec_path: str | Path,
    limit: str | None = None,
    on_event: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Converge every node (or those in ``limit``, a hostlist/group selector) to the spec."""
    from gpuforge.plan import record_applied

    result = run_deploys(spec_path, limit, on_event)
    if result.ok and limit is None:
        record_applied(load_spec(spec_path))
    return result


def run_deploys(
    spec_path: str | Path,
    limit: str | None = None,
    on_event: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Run the site deploy on the selected nodes (dry when ``layer_ops.DRY_RUN`` is set)."""
    from deploys.site import site

    say = on_event or (lambda _msg: None)
    logging.getLogger("pyinfra").setLevel(logging.CRITICAL)
    spec = load_spec(spec_path)
    if spec.slurm is not None:
        SecretStore(spec.cluster.name).load()  # generate once, before any host is touched
    names = select_nodes(spec, limit) if limit else None
    state = build_state(spec, spec_path, names)
    layer_ops.JOURNAL.clear()
    from deploys import slurm as slurm_deploy

    slurm_deploy.DECISIONS.clear()
    say(f"connecting to {len(state.inventory)} node(s)")
    connect_all(state)
    results = {h.name: HostResult(h.name) for h in state.inventory}
    for h in state.inventory:
        if not h.connected:
            results[h.name].connected = False
            results[h.name].error = "unreachable over SSH (check the address, key and known_hosts)"
    say("planning and converging")
    add_deploy(state, site)
    try:
        run_ops(state)
    except Exception as e:  # pyinfra raises when every host failed
        say(f"stopped: {e}")
    for op_hash in state.get_op_order():
        meta = state.get_op_meta(op_hash)
        op_name = ", ".join(sorted(n.rsplit(" | ", 1)[-1] for n in meta.names))
        for h in state.inventory:
            data = state.ops.get(h, {}).get(op_hash)
            if data is None:
                continue
            om = data.operation_meta
            if not om.is_complete():
                continue
            if om.did_error():
                results[h.name].error = results[h.name].error or f"{op_name}: {_last_lines(om.stderr) or 'failed'}"
            elif om.did_change():
                results[h.name].changed.append(op_name)
            else:
                results[h.name].unchanged += 1
    for h in state.inventory:
        if h in state.failed_hosts and results[h.name].error is None:
            results[h.name].error = "failed (see above)"
    return ApplyResult(results)

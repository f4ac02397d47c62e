"""Run the site deploy on an image build's container as if it were a node of the group.

One host: the group's first node by name (its spec identity: roles, group, hardware), reached at
the build container's address with the build's key and known_hosts. The run's ``RunState.image``
is an :class:`~gpuforge.deploy.image_mode.ImageBuild`: each operation does what its image tag
allows (``gpuforge.deploy.image_mode``), nothing per node or secret.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops

from gpuforge.deploy.fact_prefetch import FactPrefetch
from gpuforge.deploy.image_mode import ImageBuild
from gpuforge.deploy.inventory import host_data
from gpuforge.deploy.run import ApplyResult, EndMergedReadsOnChange, HostResult, collect_results, with_defaults
from gpuforge.deploy.runstate import RUN_STATE_KEY, RunState
from gpuforge.spec.cluster import Cluster
from gpuforge.spec.nodes import Node


def run_image_build(
    cluster: Cluster, node: Node, address: str, hook: ImageBuild, say: Callable[[str], None]
) -> ApplyResult:
    """Converge the build container at ``address`` as ``node`` in image mode; the result names ``node``."""
    from gpuforge.deploy.layers.site import site

    logging.getLogger("pyinfra").setLevel(logging.CRITICAL)
    run = RunState(image=hook)
    data = {**host_data(cluster, node), "ssh_hostname": address, RUN_STATE_KEY: run}
    config = Config(CONNECT_TIMEOUT=10, FAIL_PERCENT=100, PARALLEL=1)
    with_defaults([(node.name, data)], config)
    inventory = Inventory(([(node.name, data)], {}))
    state = State(inventory, config, check_for_changes=False)
    with contextlib.suppress(PyinfraError):
        connect_all(state)
    results = {h.name: HostResult(h.name) for h in state.inventory}
    if not all(h.connected for h in state.inventory):
        results[node.name].connected = False
        results[node.name].error = f"the build container at {address} is unreachable over SSH"
        return ApplyResult(results)
    run.prefetch = FactPrefetch()
    state.add_callback_handler(EndMergedReadsOnChange(run.prefetch))
    add_deploy(state, site)
    say(f"converging the image as {node.name} (group {node.group}) at {address}")
    try:
        run_ops(state)
    except Exception as e:  # pyinfra raises when the host failed
        say(f"stopped: {e}")
    collect_results(state, run, results, {})
    return ApplyResult(results)

"""What a deploy knows about the host it runs on: the spec, this node, the secrets.

The inventory (``gpuforge.deploy.inventory``) puts the spec path and node name in host data;
everything else is derived here, so the same deploys run under ``gpuforge apply`` and
under the plain ``pyinfra`` CLI.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pyinfra import host

from gpuforge.deploy.runstate import RUN_STATE_KEY, SPEC_KEY, RunState
from gpuforge.deploy.secrets import SecretStore
from gpuforge.render.files import Secrets
from gpuforge.spec import Node, Spec, load_spec, resolve_nodes


@cache
def _spec(path: str, mtime: float) -> Spec:
    return load_spec(path)


def spec() -> Spec:
    """The spec the run loaded (host data, :func:`gpuforge.deploy.inventory.host_data`); under the plain
    ``pyinfra`` CLI, the file its inventory names (read once per version of the file)."""
    loaded = host.data.get(SPEC_KEY)
    if isinstance(loaded, Spec):
        return loaded
    path = host.data.get("gpuforge_spec_path")
    if not path:
        raise RuntimeError("host data has no gpuforge_spec_path: use the gpuforge inventory adapter")
    return _spec(path, Path(path).stat().st_mtime)


def node() -> Node:
    name = host.data.get("gpuforge_node")
    for n in resolve_nodes(spec()):
        if n.name == name:
            return n
    raise RuntimeError(f"host {host.name} ({name}) is not a node of the spec")


@cache
def _secrets(cluster: str) -> Secrets:
    return SecretStore(cluster).load()


def secrets() -> Secrets:
    """The cluster's real secrets (only ever uploaded as files, never printed)."""
    return _secrets(spec().cluster.name)


@cache
def _k8s_pki(cluster: str) -> dict[str, bytes]:
    return SecretStore(cluster).kubernetes_pki()


def k8s_pki() -> dict[str, bytes]:
    """The Kubernetes cluster's shared keys (CA and others; only ever uploaded as 0600 files)."""
    return _k8s_pki(spec().cluster.name)


def run_state() -> RunState:
    """This run's records, shared by every host of the run (put in host data by the inventory)."""
    run = host.data.get(RUN_STATE_KEY)
    if not isinstance(run, RunState):
        raise RuntimeError(f"host data has no {RUN_STATE_KEY}: use the gpuforge inventory adapter")
    return run


def run_as_cli_deploy(namespace: dict[str, object]) -> bool:
    """True when a deploy file is being executed by the plain ``pyinfra`` CLI.

    pyinfra executes deploy files with a namespace that has no ``__name__``; imported
    modules always have one.
    """
    return "__name__" not in namespace
